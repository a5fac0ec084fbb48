// A voice agent's session through OpenAI's Agents SDK (@openai/agents-realtime, which
// @openai/agents re-exports): a RealtimeSession over its WebSocket transport (in Node it
// sends the key as Authorization: Bearer), connected to the gateway's
// /v1/realtime?model=... (a url given to connect is used as it is, so it names the
// model) with the member's Tollgate key, sends two typed messages and
// waits for the agent's answer to each. Scenario "voice"; TOLLGATE_MODEL "default"
// leaves the model to the SDK (DEFAULT_OPENAI_REALTIME_MODEL). Reports
// {text (the answers' transcripts joined by a newline), model, chunks (answers),
// closeCode} besides report.mjs's fields; a refused handshake is reported as a refused
// call (status, headerCode).
import { DEFAULT_OPENAI_REALTIME_MODEL, RealtimeAgent, RealtimeSession } from '@openai/agents-realtime';
import { handshakeRefused, run, settings } from './report.mjs';

const s = settings();
if (s.scenario !== 'voice') throw new Error(`${s.scenario} is not a voice scenario`);

await run('@openai/agents-realtime', s.scenario, async () => {
  const agent = new RealtimeAgent({ name: 'Toll clerk', instructions: 'Answer questions about tolls.' });
  const session = new RealtimeSession(agent, {
    transport: 'websocket',
    ...(s.model === 'default' ? {} : { model: s.model }),
  });
  const errors = [];
  session.on('error', (e) => errors.push(e?.error ?? e));
  const answers = [];
  let answered;
  session.on('agent_end', (_ctx, _agent, output) => {
    answers.push(output);
    answered?.();
  });
  // A url of the program's own is used as it is: it names the model, as the SDK's own
  // (wss://api.openai.com/v1/realtime?model=...) does.
  const model = s.model === 'default' ? DEFAULT_OPENAI_REALTIME_MODEL : s.model;
  const url = new URL(`${s.baseURL.replace(/^http/, 'ws')}/v1/realtime`);
  url.searchParams.set('model', model);
  try {
    await session.connect({ apiKey: s.apiKey, url: url.toString() });
  } catch (e) {
    // A refused handshake: its status is in the ws package's message, on the error
    // thrown or on one the session reported.
    throw [e, ...errors].map(handshakeRefused).find((err) => typeof err?.status === 'number') ?? e;
  }
  for (const message of ['How are tolls paid?', 'And at night?']) {
    let timer;
    const done = new Promise((resolve, reject) => {
      answered = resolve;
      timer = setTimeout(() => reject(new Error(`no answer within 10 s: ${JSON.stringify(errors)}`)), 10_000);
    });
    session.sendMessage(message);
    await done;
    clearTimeout(timer);
  }
  session.close();
  return { text: answers.join('\n'), model, chunks: answers.length };
});
