// One call through LangChain's chat models (@langchain/openai's ChatOpenAI,
// @langchain/anthropic's ChatAnthropic, on @langchain/core), with their defaults (their
// retries among them: LangChain's own caller, up to 6 retries, the SDK client's turned
// off). The model decides the class: a claude-* model is ChatAnthropic (Anthropic's
// Messages API), any other ChatOpenAI (OpenAI's chat completions; with useResponsesApi
// for the "responses" scenarios). Scenarios: "json" (invoke), "stream" (stream, its
// chunks concatenated), "responses", "responses-stream". See report.mjs for the
// settings.
import { ChatAnthropic } from '@langchain/anthropic';
import { ChatOpenAI } from '@langchain/openai';
import { run, settings } from './report.mjs';

const s = settings();
let chat;
if (s.model.startsWith('claude')) {
  if (s.scenario.startsWith('responses')) throw new Error('the Responses API is OpenAI\'s');
  chat = new ChatAnthropic({ model: s.model, apiKey: s.apiKey, anthropicApiUrl: s.baseURL });
} else {
  chat = new ChatOpenAI({
    model: s.model,
    apiKey: s.apiKey,
    configuration: { baseURL: `${s.baseURL}/v1` },
    useResponsesApi: s.scenario.startsWith('responses'),
  });
}

// textOf is a message's text: a string, or its text blocks (the Responses API's and
// Anthropic's content may be blocks).
function textOf(content) {
  if (typeof content === 'string') return content;
  return content.map((b) => (b.type === 'text' ? b.text : '')).join('');
}

// unwrapped gives an error LangChain rethrew report.mjs's names: the SDK's error keeps
// its status and headers; the 429's body code is in its error.
function unwrapped(e) {
  if (e && typeof e === 'object' && typeof e.status !== 'number' && typeof e.response?.status === 'number') {
    e.status = e.response.status;
    e.headers = e.response.headers;
  }
  return e;
}

await run('@langchain/core', s.scenario, async () => {
  try {
    if (s.scenario === 'json' || s.scenario === 'responses') {
      const m = await chat.invoke('How are tolls paid?');
      return { text: textOf(m.content), model: m.response_metadata?.model_name ?? m.response_metadata?.model ?? null, usage: m.usage_metadata, chunks: 1 };
    }
    if (s.scenario !== 'stream' && s.scenario !== 'responses-stream') {
      throw new Error(`${s.scenario} is not a LangChain scenario`);
    }
    let whole;
    let chunks = 0;
    for await (const chunk of await chat.stream('How are tolls paid?')) {
      chunks++;
      whole = whole === undefined ? chunk : whole.concat(chunk);
    }
    return { text: textOf(whole.content), model: whole.response_metadata?.model_name ?? whole.response_metadata?.model ?? null, usage: whole.usage_metadata, chunks };
  } catch (e) {
    throw unwrapped(e);
  }
});
