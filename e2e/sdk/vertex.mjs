// One Claude message on Google Vertex AI through Anthropic's official Vertex SDK
// (@anthropic-ai/vertex-sdk), its base URL at the gateway (/v1, as Vertex's own
// https://{region}-aiplatform.googleapis.com/v1), region us-east5, project
// tollgate-test. The SDK posts to
// /v1/projects/tollgate-test/locations/us-east5/publishers/anthropic/models/{model}:rawPredict
// (:streamRawPredict when streamed), the model out of the body and anthropic_version in
// it (the base SDK's anthropic-version, moved from the header). TOLLGATE_MODEL is the Vertex model id
// ("claude-sonnet-4-5@20250929"). Scenarios: "vertex" (messages.create) and
// "vertex-stream" (messages.stream: the text as it comes, the final message's usage) and
// "vertex-count" (messages.countTokens: .../models/count-tokens:rawPredict), and
// "vertex-stream-stop", "-break", "-abort" (messages.create's stream left at message_stop,
// after the first text, or aborted there: report.mjs's leaveOf).
// Otherwise the client's defaults (two retries, its backoff, its headers). See
// report.mjs for the settings and the output.
//
// The member's Tollgate key goes as `Authorization: Bearer <key>`, where Vertex takes
// a Google access token: the gateway puts its own Google token there. The SDK's
// `accessToken` option does not do this (1.1.3 keeps it and never sends it: every
// request takes its headers from a google-auth-library client, by default
// Application Default Credentials, found on the machine or the metadata server), so
// the key is given as that client: an authClient whose request headers are the key.
// No Google credentials are looked for.
import { AnthropicVertex } from '@anthropic-ai/vertex-sdk';
import { consume, leaveOf, run, settings } from './report.mjs';

const s = settings();
const client = new AnthropicVertex({
  baseURL: `${s.baseURL}/v1`,
  region: 'us-east5',
  projectId: 'tollgate-test',
  // What the SDK asks of an AuthClient: getRequestHeaders() (and projectId, unused
  // here: the option above names the project).
  authClient: {
    projectId: null,
    getRequestHeaders: async () => new Headers({ authorization: `Bearer ${s.apiKey}` }),
  },
});
const request = { model: s.model, max_tokens: 256, messages: [{ role: 'user', content: 'How are tolls paid?' }] };

const { base, leave } = leaveOf(s.scenario);

await run('@anthropic-ai/vertex-sdk', s.scenario, async () => {
  if (base === 'vertex-stream' && leave) {
    // messages.create with stream: true, read as events and left as leave says
    // (report.mjs's leaveOf): at message_stop, after the first text, or aborted there.
    const controller = new AbortController();
    const stream = await client.messages.create({ ...request, stream: true }, { signal: controller.signal });
    let text = '';
    let model = null;
    const usage = {};
    let chunks = 0;
    const left = await consume(stream, leave, controller, (event) => {
      chunks++;
      if (event.type === 'message_start') {
        model = event.message.model;
        Object.assign(usage, event.message.usage);
      } else if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') {
        text += event.delta.text;
        return 'text';
      } else if (event.type === 'message_delta') {
        Object.assign(usage, event.usage);
      } else if (event.type === 'message_stop') {
        return 'end';
      }
      return '';
    });
    return { text, model, usage, chunks, left };
  }
  switch (s.scenario) {
    case 'vertex': {
      const res = await client.messages.create(request);
      const text = res.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
      return { text, model: res.model, usage: res.usage ?? null, chunks: 1 };
    }
    case 'vertex-stream': {
      const stream = client.messages.stream(request);
      let text = '';
      let chunks = 0;
      stream.on('text', (delta) => {
        chunks++;
        text += delta;
      });
      // The final message: message_start's usage with message_delta's output tokens.
      const msg = await stream.finalMessage();
      return { text, model: msg.model, usage: msg.usage ?? null, chunks, left: 'end' };
    }
    case 'vertex-count': {
      // messages.countTokens: Vertex's count-tokens:rawPredict, the model in the body.
      const res = await client.messages.countTokens({ model: s.model, messages: request.messages });
      return { text: '', model: null, usage: res, chunks: 0 };
    }
    default:
      throw new Error(`"${s.scenario}" is not a Vertex scenario`);
  }
});
