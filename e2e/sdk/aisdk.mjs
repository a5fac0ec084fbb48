// One call through Vercel's AI SDK (ai, with its @ai-sdk/openai and @ai-sdk/anthropic
// providers), the way a web app's server code makes it, with the SDK's defaults (its
// retries among them: two more attempts of a 429, after 2 s and 4 s, a Retry-After of
// more than a minute not waited for). The model decides the provider: a claude-* model
// goes to Anthropic's Messages API, any other to OpenAI's. Scenarios: "json"
// (generateText) and "stream" (streamText) on OpenAI's chat completions or Anthropic's
// messages, "responses" and "responses-stream" the same on OpenAI's Responses API (the
// provider's default for openai(model)); a stream's "-break" (the program breaks out of
// its loop over fullStream after the first text) and "-abort" (it aborts the call's
// abortSignal there), report.mjs's leaveOf; "tools" and "tools-stream" (and
// "responses-tools", "responses-tools-stream") give the model a tool, pay_toll, and let
// the call run up to three steps, as an agent does: the model asks for the tool, the
// SDK runs it and calls again with its result (reported: the steps and the roads the
// tool was run for; report.mjs's toll). AISDK_MAX_RETRIES, when set, is the call's
// maxRetries. A RetryError (every attempt failed) reports its last attempt's error and
// how many attempts there were. See report.mjs for the settings.
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { RetryError, generateText, isStepCount, jsonSchema, streamText, tool } from 'ai';
import { consume, leaveOf, run, settings, toll } from './report.mjs';

const s = settings();
const anthropic = s.model.startsWith('claude');
const base = `${s.baseURL}/v1`;
let model;
if (anthropic) {
  if (s.scenario.startsWith('responses')) throw new Error('the Responses API is OpenAI\'s');
  model = createAnthropic({ baseURL: base, apiKey: s.apiKey })(s.model);
} else {
  const openai = createOpenAI({ baseURL: base, apiKey: s.apiKey });
  model = s.scenario.startsWith('responses') ? openai.responses(s.model) : openai.chat(s.model);
}
const retries = process.env.AISDK_MAX_RETRIES;
const options = {
  model,
  prompt: 'How are tolls paid?',
  ...(retries === undefined ? {} : { maxRetries: Number(retries) }),
};

// unwrapped is the error the caller sees as an HTTP status: a RetryError's last attempt
// (its attempts counted), an APICallError as it is, given report.mjs's names for its
// status, headers and body.
function unwrapped(e) {
  let err = e;
  let attempts = 1;
  if (RetryError.isInstance(e)) {
    err = e.lastError;
    attempts = e.errors.length;
  }
  if (err && typeof err === 'object' && typeof err.statusCode === 'number') {
    err.headers = new Headers(err.responseHeaders ?? {});
    err.body = err.responseBody;
    err.attempts = attempts;
  }
  return err;
}

// tools is the agent's one tool (report.mjs's toll).
const tools = {
  pay_toll: tool({
    description: toll.description,
    inputSchema: jsonSchema({ type: 'object', properties: { road: { type: 'string' } }, required: ['road'], additionalProperties: false }),
    execute: toll.pay,
  }),
};

await run('ai', s.scenario, async () => {
  try {
    if (s.scenario.endsWith('tools') || s.scenario.endsWith('tools-stream')) {
      const agent = { ...options, tools, stopWhen: isStepCount(3) };
      if (s.scenario.endsWith('tools')) {
        const r = await generateText(agent);
        return { text: r.text, model: r.response.modelId, usage: r.totalUsage, chunks: 1, steps: r.steps.length, tolls: toll.tolls };
      }
      const r = streamText({ ...agent, onError: () => {} });
      let text = '';
      let chunks = 0;
      for await (const part of r.fullStream) {
        if (part.type === 'error') throw part.error;
        if (part.type === 'text-delta') {
          chunks++;
          text += part.text;
        }
      }
      return { text, model: (await r.response).modelId, usage: await r.totalUsage, chunks, steps: (await r.steps).length, tolls: toll.tolls };
    }
    if (s.scenario === 'json' || s.scenario === 'responses') {
      const r = await generateText(options);
      return { text: r.text, model: r.response.modelId, usage: r.usage, chunks: 1 };
    }
    const { base, leave } = leaveOf(s.scenario);
    if (base !== 'stream' && base !== 'responses-stream' || leave === 'stop') {
      throw new Error(`${s.scenario} is not an AI SDK scenario`);
    }
    // streamText reports a failed call as an error part of its stream, not by throwing.
    const controller = new AbortController();
    const r = streamText({ ...options, abortSignal: controller.signal, onError: () => {} });
    let text = '';
    let chunks = 0;
    const left = await consume(r.fullStream, leave, controller, (part) => {
      if (part.type === 'error') throw part.error;
      if (part.type !== 'text-delta') return part.type === 'finish' ? 'end' : '';
      chunks++;
      text += part.text;
      return 'text';
    });
    if (left !== 'end' || leave !== '') {
      return { text, chunks, left }; // its usage and response are never told
    }
    return { text, model: (await r.response).modelId, usage: await r.usage, chunks, left };
  } catch (e) {
    throw unwrapped(e);
  }
});
