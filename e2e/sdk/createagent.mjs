// An agent made with LangChain's createAgent (the langchain package; its loop runs on
// LangGraph), written as LangChain's docs write one: the model named "provider:model",
// configured from the environment (OPENAI_BASE_URL and OPENAI_API_KEY,
// ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY: set here from report.mjs's settings to the
// gateway and the member's key, as a deployment would set them), one tool (pay_toll,
// report.mjs's toll), the agent invoked or streamed. A claude-* model is
// "anthropic:<model>" (Anthropic's messages), any other "openai:<model>". Given the name
// itself, createAgent makes an OpenAI model on the Responses API (langchain 1.5.14:
// useResponsesApi for any "openai:" name); given initChatModel's model of the same name,
// on chat completions (ChatOpenAI's default). So the "responses-" scenarios give the name,
// the others initChatModel's model. Scenarios: "tools" and "tools-stream",
// "responses-tools" and "responses-tools-stream" (invoke; stream with the messages and
// values modes, the model's tokens and the agent's state). Reported besides report.mjs's
// fields: steps (the model's answers in the agent's state) and tolls (the roads the
// tool was run for), and foreign: the requests to any other host than the gateway's,
// answered here and never sent (report.mjs's keepHome), once LangChain's callbacks (a
// LangSmith trace, when LANGSMITH_TRACING=true) are done. The graph's recursion limit
// bounds a model that never stops asking for the tool. LANGCHAIN_MODEL_RETRY, when set,
// gives the agent LangChain's modelRetryMiddleware with that onFailure ("continue", its
// default: a model call that failed for good becomes the agent's answer; "error": it is
// thrown). See report.mjs for the settings.
import { modelOf, textOf, unwrapped } from './lcmessages.mjs';
import { keepHome, run, settings, toll } from './report.mjs';

const s = settings();
process.env.OPENAI_BASE_URL = `${s.baseURL}/v1`;
process.env.OPENAI_API_KEY = s.apiKey;
process.env.ANTHROPIC_BASE_URL = s.baseURL;
process.env.ANTHROPIC_API_KEY = s.apiKey;
const foreign = keepHome(s);
const { AIMessage, createAgent, initChatModel, modelRetryMiddleware, tool } = await import('langchain');
const { z } = await import('zod');
const { awaitAllCallbacks } = await import('@langchain/core/callbacks/promises');

if (!['tools', 'tools-stream', 'responses-tools', 'responses-tools-stream'].includes(s.scenario)) {
  throw new Error(`${s.scenario} is not a createAgent scenario`);
}
const claude = s.model.startsWith('claude');
if (claude && s.scenario.startsWith('responses')) throw new Error('the Responses API is OpenAI\'s');
const name = `${claude ? 'anthropic' : 'openai'}:${s.model}`;
const agent = createAgent({
  model: s.scenario.startsWith('responses') ? name : await initChatModel(name),
  tools: [tool(async (input) => JSON.stringify(await toll.pay(input)),
    { name: toll.name, description: toll.description, schema: z.object({ road: z.string() }) })],
  middleware: process.env.LANGCHAIN_MODEL_RETRY ? [modelRetryMiddleware({ onFailure: process.env.LANGCHAIN_MODEL_RETRY })] : [],
});

await run('langchain', s.scenario, async () => {
  const input = { messages: [{ role: 'user', content: 'Pay the toll of the A1.' }] };
  const config = { recursionLimit: 8 };
  let state;
  let chunks = 0;
  try {
    if (s.scenario.endsWith('-stream')) {
      for await (const [mode, chunk] of await agent.stream(input, { ...config, streamMode: ['messages', 'values'] })) {
        if (mode === 'messages') chunks++;
        else state = chunk;
      }
    } else {
      state = await agent.invoke(input, config);
      chunks = 1;
    }
  } catch (e) {
    throw unwrapped(e);
  }
  const answers = state.messages.filter((m) => AIMessage.isInstance(m));
  const last = answers.at(-1);
  await awaitAllCallbacks();
  return { text: textOf(last.content), model: modelOf(last), usage: last.usage_metadata, chunks, steps: answers.length, tolls: toll.tolls, foreign };
});
