// One agent run through OpenAI's Agents SDK (@openai/agents), configured as its docs say
// for another endpoint: OPENAI_BASE_URL and OPENAI_API_KEY in the environment (the test
// sets them to the gateway's /v1 and the member's Tollgate key). The agent has one tool,
// pay_toll (report.mjs's toll), and is asked to use it: the model asks for the tool,
// the SDK runs it and calls again with its result. Scenarios: "agent" and "agent-stream" (run, and run with
// stream: true) on the SDK's default API, the Responses API; "agent-chat" and
// "agent-chat-stream" the same on chat completions (setOpenAIAPI); "agent-ws" and
// "agent-ws-stream" on the Responses API's WebSocket mode (setOpenAIResponsesTransport);
// "agent-handoff" and "agent-handoff-stream" start with a triage agent on the SDK's
// default model, which has no tool but a handoff to the toll clerk (the agent above,
// on TOLLGATE_MODEL). TOLLGATE_MODEL "default" leaves the clerk's model unset (the
// SDK's default model).
//
// The SDK exports its traces to api.openai.com with OPENAI_API_KEY unless tracing is
// turned off (OPENAI_AGENTS_DISABLE_TRACING=1): every request the program makes to
// another host than the gateway's is recorded and answered here, never sent
// (report.mjs's keepHome). The traces are flushed (as the SDK does
// when the process is about to exit) before the result is reported, with
// {steps, tolls, lastAgent, foreign} besides report.mjs's fields.
import { keepHome, run as report, settings, toll } from './report.mjs';

const s = settings();
const foreign = keepHome(s);
// Imported once fetch is wrapped, so that every client the SDK makes uses the wrapper.
const { Agent, getGlobalTraceProvider, retryPolicies, run, setOpenAIAPI, setOpenAIResponsesTransport, tool } = await import('@openai/agents');
const { z } = await import('zod');

if (!s.scenario.startsWith('agent')) throw new Error(`${s.scenario} is not an Agents SDK scenario`);
if (s.scenario.startsWith('agent-chat')) setOpenAIAPI('chat_completions');
if (s.scenario.startsWith('agent-ws')) setOpenAIResponsesTransport('websocket');
// AGENTS_RETRY_POLICY, when set, turns on the runner's own retries of model calls (off
// by default), two at most, with a policy as the SDK's docs compose them: "suggested"
// any of the provider's advice (X-Should-Retry), a network error and the statuses 429,
// 500, 502 and 503; "status" the status 429 alone.
const retryPolicy = {
  suggested: () => retryPolicies.any(retryPolicies.providerSuggested(), retryPolicies.networkError(), retryPolicies.httpStatus([429, 500, 502, 503])),
  status: () => retryPolicies.httpStatus([429]),
}[process.env.AGENTS_RETRY_POLICY ?? ''];
const modelSettings = retryPolicy ? { modelSettings: { retry: { maxRetries: 2, policy: retryPolicy() } } } : {};
const clerk = new Agent({
  name: 'Toll clerk',
  instructions: 'Pay the tolls you are asked to pay.',
  tools: [tool({ name: toll.name, description: toll.description, parameters: z.object({ road: z.string() }), execute: toll.pay })],
  ...(s.model === 'default' ? {} : { model: s.model }),
  ...modelSettings,
});
const agent = !s.scenario.startsWith('agent-handoff') ? clerk : new Agent({
  name: 'Triage',
  instructions: 'Hand tolls over to the toll clerk.',
  handoffs: [clerk],
});

await report('@openai/agents', s.scenario, async () => {
  const input = 'Pay the toll of the A1.';
  let result;
  let chunks = 0;
  if (s.scenario.endsWith('-stream')) {
    result = await run(agent, input, { stream: true });
    for await (const _ of result.toTextStream()) chunks++;
    await result.completed;
    if (result.error) throw result.error;
  } else {
    result = await run(agent, input);
    chunks = 1;
  }
  await getGlobalTraceProvider().forceFlush();
  const usage = result.state.usage;
  return {
    text: result.finalOutput,
    usage: { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens, requests: usage.requests },
    chunks,
    steps: result.rawResponses.length,
    tolls: toll.tolls,
    lastAgent: result.lastAgent?.name ?? null,
    foreign,
  };
});
