// One Amazon Bedrock Runtime call through AWS's official JavaScript SDK
// (@aws-sdk/client-bedrock-runtime), its endpoint at the gateway, region us-east-1,
// authenticated with a Bedrock API key, here the member's Tollgate key: sent as
// `Authorization: Bearer <key>` (the SDK's httpBearerAuth scheme), with no SigV4
// signing. TOLLGATE_MODEL is the model id or inference profile
// ("anthropic.claude-sonnet-4-5-20250929-v1:0", "us.anthropic..."), which the SDK puts in
// the path, percent-encoded. Scenarios: "invoke" (InvokeModel with an Anthropic Messages
// body), "invoke-stream" (InvokeModelWithResponseStream: each chunk's bytes are one
// Anthropic stream event's JSON), "converse" (Converse) and "converse-stream"
// (ConverseStream), and those two at Bedrock's priority tier ("converse-priority",
// "converse-stream-priority") or at its latency-optimized inference
// ("converse-latency", "converse-stream-latency", and "invoke-latency": InvokeModel's
// performanceConfigLatency, a header on the wire), and InvokeModel at the priority tier
// ("invoke-priority": its serviceTier, a header too). Each of the four with "-guardrail" after it is guarded by
// the guardrail gr-tolls (Converse's guardrailConfig, InvokeModel's guardrailIdentifier
// and guardrailVersion), its trace not asked for; "converse-guardrail-blocked" by the one
// that refuses every prompt (fakellm.BlockingGuardrail). Their usage carries the trace the
// answer gave (guardrailTrace). "apply-guardrail" calls the guardrail gr-tolls on its own
// (ApplyGuardrail, no model; TOLLGATE_MODEL unused): its usage is the guardrail's.
// "count-tokens" counts a Converse request's input (CountTokens, free). "guardrail-checks"
// runs the detect-only content filter and prompt attack checks (InvokeGuardrailChecks).
// "invoke-stream" and "converse-stream" with "-stop", "-break" or "-abort" after them
// leave their stream at its terminal event (the metrics chunk, the metadata event), after
// the first text, or abort the request there (client.send's abortSignal). See report.mjs
// for the settings and the output.
import {
  ApplyGuardrailCommand,
  BedrockRuntimeClient,
  ConverseCommand,
  ConverseStreamCommand,
  CountTokensCommand,
  InvokeGuardrailChecksCommand,
  InvokeModelCommand,
  InvokeModelWithResponseStreamCommand,
} from '@aws-sdk/client-bedrock-runtime';
import { consume, leaveOf, run, settings } from './report.mjs';

const s = settings();
const client = new BedrockRuntimeClient({
  endpoint: s.baseURL,
  region: 'us-east-1',
  // A Bedrock API key is a bearer token: the SDK sends it as `Authorization: Bearer`
  // when it is the token and httpBearerAuth comes first. Without the preference the SDK
  // would sign with SigV4 (its first scheme) from whatever credentials it finds.
  // Setting AWS_BEARER_TOKEN_BEDROCK in the environment does the same (it is what
  // Claude Code and the AWS docs use); here it is explicit, the environment being
  // runSDK's.
  token: { token: s.apiKey },
  authSchemePreference: ['httpBearerAuth'],
  // Never SigV4: were the SDK to fall back to it, the call fails here instead of being
  // signed with credentials found on the machine.
  credentials: async () => {
    throw new Error('SigV4 was chosen: the test sends a Bedrock API key (Authorization: Bearer), never AWS credentials');
  },
  // One attempt: the SDK's standard retry strategy retries a 429 (a throttling error to
  // it) twice with backoff and does not read X-Should-Retry, so a refused call would be
  // sent three times.
  maxAttempts: 1,
});
const prompt = 'How are tolls paid?';
// The scenario's name without its guardrail suffix, and the guardrail ('' for none).
const guardrail = s.scenario === 'apply-guardrail' ? '' : s.scenario.endsWith('-guardrail-blocked') ? 'gr-blocks-all' : s.scenario.endsWith('-guardrail') ? 'gr-tolls' : '';
// How a stream is left ("-stop", "-break", "-abort": report.mjs's leaveOf), taken off too.
const { base: scenario, leave } = leaveOf(s.scenario.replace(/-guardrail(-blocked)?$/, ''));
const controller = new AbortController();
// invokeGuardrail is InvokeModel's guardrail parameters (headers on the wire).
const invokeGuardrail = guardrail ? { guardrailIdentifier: guardrail, guardrailVersion: '1' } : {};
const utf8 = new TextDecoder();

await run('@aws-sdk/client-bedrock-runtime', s.scenario, async () => {
  switch (scenario) {
    case 'invoke':
    case 'invoke-latency':
    case 'invoke-priority': {
      const res = await client.send(new InvokeModelCommand({
        modelId: s.model,
        contentType: 'application/json',
        accept: 'application/json',
        body: JSON.stringify(anthropicRequest()),
        ...invokeGuardrail,
        ...(scenario === 'invoke-latency' ? { performanceConfigLatency: 'optimized' } : {}),
        ...(scenario === 'invoke-priority' ? { serviceTier: 'priority' } : {}),
      }));
      const msg = JSON.parse(utf8.decode(res.body));
      const text = (msg.content ?? []).filter((b) => b.type === 'text').map((b) => b.text).join('');
      return {
        text, model: msg.model ?? null, chunks: 1,
        usage: {
          ...msg.usage, guardrailTrace: msg['amazon-bedrock-trace'] ?? null, performanceConfigLatency: res.performanceConfigLatency ?? null,
          serviceTier: res.serviceTier ?? null,
        },
      };
    }
    case 'invoke-stream': {
      const res = await client.send(new InvokeModelWithResponseStreamCommand({
        modelId: s.model,
        contentType: 'application/json',
        accept: 'application/json',
        body: JSON.stringify(anthropicRequest()),
        ...invokeGuardrail,
      }), { abortSignal: controller.signal });
      let text = '';
      let model = null;
      const usage = {};
      let chunks = 0;
      // The last chunk (message_stop with the invocation metrics) is the terminal event.
      const left = await consume(res.body, leave, controller, (event) => {
        if (!event.chunk?.bytes) return '';
        chunks++;
        const e = JSON.parse(utf8.decode(event.chunk.bytes));
        if (e.type === 'message_start') {
          model = e.message?.model ?? model;
          Object.assign(usage, e.message?.usage);
        } else if (e.type === 'content_block_delta' && e.delta?.type === 'text_delta') {
          text += e.delta.text;
          return 'text';
        } else if (e.type === 'message_delta') {
          Object.assign(usage, e.usage);
        } else if (e.type === 'message_stop' && e['amazon-bedrock-invocationMetrics']) {
          usage['amazon-bedrock-invocationMetrics'] = e['amazon-bedrock-invocationMetrics'];
          usage.guardrailTrace = e['amazon-bedrock-trace'] ?? null;
          return 'end';
        }
        return '';
      });
      return { text, model, usage, chunks, left };
    }
    case 'converse':
    case 'converse-priority':
    case 'converse-latency': {
      const res = await client.send(new ConverseCommand({ modelId: s.model, ...converseRequest() }));
      const text = (res.output?.message?.content ?? []).map((b) => b.text ?? '').join('');
      // Converse names no model in its answer.
      return {
        text, model: null, chunks: 1,
        usage: {
          ...res.usage, serviceTier: res.serviceTier, performanceConfig: res.performanceConfig ?? null, stopReason: res.stopReason,
          guardrailTrace: res.trace?.guardrail ?? null,
        },
      };
    }
    case 'converse-stream':
    case 'converse-stream-priority':
    case 'converse-stream-latency': {
      const res = await client.send(new ConverseStreamCommand({ modelId: s.model, ...converseRequest() }), { abortSignal: controller.signal });
      let text = '';
      let usage = null;
      let chunks = 0;
      // The metadata event, with the usage, is the terminal event.
      const left = await consume(res.stream, leave, controller, (event) => {
        chunks++;
        if (event.contentBlockDelta) {
          text += event.contentBlockDelta.delta?.text ?? '';
          return 'text';
        }
        if (event.metadata) {
          usage = {
            ...event.metadata.usage, serviceTier: event.metadata.serviceTier, performanceConfig: event.metadata.performanceConfig ?? null,
            guardrailTrace: event.metadata.trace?.guardrail ?? null,
          };
          return 'end';
        }
        return '';
      });
      return { text, model: null, usage, chunks, left };
    }
    case 'count-tokens': {
      const res = await client.send(new CountTokensCommand({ modelId: s.model, input: { converse: { messages: converseRequest().messages } } }));
      return { text: '', model: null, usage: { inputTokens: res.inputTokens ?? null }, chunks: 1 };
    }
    case 'guardrail-checks': {
      const res = await client.send(new InvokeGuardrailChecksCommand({
        messages: [{ role: 'user', content: [{ text: prompt }] }],
        checks: {
          contentFilter: { categories: [{ category: 'VIOLENCE' }] },
          promptAttack: { categories: [{ category: 'JAILBREAK' }] },
        },
      }));
      return { text: '', model: null, usage: res.usage ?? null, chunks: 1 };
    }
    case 'apply': {
      const res = await client.send(new ApplyGuardrailCommand({
        guardrailIdentifier: 'gr-tolls',
        guardrailVersion: '1',
        source: 'INPUT',
        content: [{ text: { text: prompt } }],
      }));
      return { text: res.action ?? '', model: null, usage: res.usage ?? null, chunks: 1 };
    }
    default:
      throw new Error(`"${s.scenario}" is not a Bedrock scenario`);

  }
});

// anthropicRequest is InvokeModel's body for a Claude model: Anthropic's Messages
// request, with Bedrock's anthropic_version and without the model (the path names it).
function anthropicRequest() {
  return { anthropic_version: 'bedrock-2023-05-31', max_tokens: 1024, messages: [{ role: 'user', content: prompt }] };
}

// converseRequest is a Converse request, at Bedrock's priority tier (serviceTier) in the
// -priority scenarios, at its latency-optimized inference (performanceConfig) in the
// -latency ones.
function converseRequest() {
  const priority = scenario.endsWith('-priority') ? { serviceTier: { type: 'priority' } }
    : scenario.endsWith('-latency') ? { performanceConfig: { latency: 'optimized' } } : {};
  const guarded = guardrail ? { guardrailConfig: { guardrailIdentifier: guardrail, guardrailVersion: '1' } } : {};
  return { messages: [{ role: 'user', content: [{ text: prompt }] }], inferenceConfig: { maxTokens: 1024 }, ...priority, ...guarded };
}
