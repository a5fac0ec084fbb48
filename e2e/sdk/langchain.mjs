// One call through LangChain's chat models (@langchain/openai's ChatOpenAI,
// @langchain/anthropic's ChatAnthropic, on @langchain/core), with their defaults (their
// retries among them: LangChain's own caller, up to 6 retries, the SDK client's turned
// off). The model decides the class: a claude-* model is ChatAnthropic (Anthropic's
// Messages API), any other ChatOpenAI (OpenAI's chat completions; with useResponsesApi
// for the "responses" scenarios). Scenarios: "json" (invoke), "stream" (stream, its
// chunks concatenated), "responses", "responses-stream"; "tools", "tools-stream",
// "responses-tools" and "responses-tools-stream" run an agent's loop the way LangChain's
// docs write one by hand: the model bound to a tool (bindTools: pay_toll), each step's
// message (invoked, or its streamed chunks concatenated) answered with the tool's
// result as a ToolMessage until the model answers without a call, three steps at most
// (reported: the steps and the roads the tool was run for; report.mjs's toll). See
// report.mjs for the settings.
import { ChatAnthropic } from '@langchain/anthropic';
import { HumanMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { ChatOpenAI } from '@langchain/openai';
import { z } from 'zod';
import { modelOf, textOf, unwrapped } from './lcmessages.mjs';
import { run, settings, toll } from './report.mjs';

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

const payToll = tool(async (input) => JSON.stringify(await toll.pay(input)),
  { name: toll.name, description: toll.description, schema: z.object({ road: z.string() }) });

// agentLoop runs the tool loop: it returns the last message and the steps taken.
async function agentLoop(stream) {
  const model = chat.bindTools([payToll]);
  const messages = [new HumanMessage('Pay the toll of the A1.')];
  let steps = 0;
  let chunks = 0;
  let message;
  while (steps < 3) {
    steps++;
    if (stream) {
      message = undefined;
      for await (const chunk of await model.stream(messages)) {
        chunks++;
        message = message === undefined ? chunk : message.concat(chunk);
      }
    } else {
      message = await model.invoke(messages);
      chunks++;
    }
    messages.push(message);
    if (!message.tool_calls?.length) break;
    for (const call of message.tool_calls) messages.push(await payToll.invoke(call));
  }
  return { text: textOf(message.content), model: modelOf(message), usage: message.usage_metadata, chunks, steps, tolls: toll.tolls };
}

await run('@langchain/core', s.scenario, async () => {
  try {
    if (s.scenario.endsWith('tools') || s.scenario.endsWith('tools-stream')) {
      return await agentLoop(s.scenario.endsWith('-stream'));
    }
    if (s.scenario === 'json' || s.scenario === 'responses') {
      const m = await chat.invoke('How are tolls paid?');
      return { text: textOf(m.content), model: modelOf(m), usage: m.usage_metadata, chunks: 1 };
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
    return { text: textOf(whole.content), model: modelOf(whole), usage: whole.usage_metadata, chunks };
  } catch (e) {
    throw unwrapped(e);
  }
});
