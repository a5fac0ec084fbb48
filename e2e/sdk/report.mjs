// Shared by the SDK scripts: read the call's settings, time it, and print one JSON line.
//
// Settings (environment): TOLLGATE_BASE_URL (the proxy, no path), TOLLGATE_API_KEY (the
// member's Tollgate key, tgk_...), TOLLGATE_MODEL; argv[2] is the scenario, "json" (one
// buffered answer), "stream", "count" (Anthropic's token counting, which generates
// nothing), "responses" / "responses-stream" (OpenAI's Responses API; "responses-search" /
// "responses-search-stream" with the web search tool), "search" / "search-stream"
// (Gemini with Grounding with Google Search), "maps" / "maps-stream" (with Grounding with
// Google Maps), "interactions" / "interactions-stream" / "interactions-background" (Gemini's
// Interactions API), "image" / "image-stream" (an image
// generation), "realtime" (a Realtime session over a WebSocket), "embeddings"
// (OpenAI's embeddings), "batch" and "background" (a batch, a background response) or
// "retrieve" (a stored response read again) or "transcribe" (an audio upload), or
// "invoke" / "invoke-stream" / "converse" / "converse-stream" (Amazon Bedrock Runtime,
// bedrock.mjs), or "vertex" / "vertex-stream" / "vertex-count" (Claude on Google Vertex AI, vertex.mjs),
// or "ocr" (Mistral's OCR, mistral.mjs), or "stream-stop" / "responses-stream-stop" (a
// stream left at its terminal event: anthropic.mjs's message_stop, openai.mjs's
// response.completed), or a stream left another way: "...-break" (the program breaks out
// of its loop after the first text), "...-abort" (it aborts the request with an
// AbortController after the first text), "...-stop" (at the stream's terminal event) of
// bedrock.mjs's, vertex.mjs's, gemini.mjs's and mistral.mjs's streams (leaveOf, consume).
// The SDK client is built with its defaults: retries, timeout, headers, fetch
// (bedrock.mjs and vertex.mjs say where they depart from them).
//
// Output, whatever happened: {sdk, sdkVersion, node, scenario, ok, status, code,
// headerCode, usageState, headersReadable (the error gave the response's headers),
// shouldRetry, retryAfter, attempts, elapsedMs, text, model, usage, chunks, searches,
// places, containers, seconds, closeCode, closeReason, steps, tolls, lastAgent, foreign, error}.
// The exit status is 0 when a line was printed.
import { readFileSync } from 'node:fs';

export function settings() {
  const scenario = process.argv[2];
  const scenarios = ['json', 'stream', 'stream-2024-06-01', 'count', 'responses', 'responses-stream', 'responses-search', 'responses-search-stream', 'responses-file-search', 'responses-file-search-stream', 'responses-image', 'responses-image-stream', 'search', 'search-stream', 'maps', 'maps-stream', 'interactions', 'interactions-stream', 'interactions-background', 'interactions-auth-token', 'interactions-webrtc', 'interactions-live', 'image', 'image-stream', 'image-stream-abort', 'image-timeout', 'image-edit-timeout', 'realtime', 'responses-ws', 'gpt-live', 'live', 'audio', 'audio-stream', 'embeddings', 'batch', 'background', 'video-extend', 'agent-events', 'retrieve', 'conversation', 'sequence', 'administration', 'transcribe',
    'transcribe-verbose', 'transcribe-text', 'transcribe-stream', 'translate', 'speech', 'speech-sse',
    'speech-mp3', 'speech-opus', 'speech-aac', 'speech-flac', 'speech-wav', 'speech-pcm',
    'invoke', 'invoke-stream', 'converse', 'converse-stream', 'vertex', 'vertex-stream', 'vertex-count', 'fast', 'fast-stream', 'priority', 'priority-stream', 'converse-priority', 'converse-stream-priority', 'converse-latency', 'converse-stream-latency', 'invoke-latency', 'invoke-priority', 'invoke-guardrail', 'invoke-stream-guardrail', 'converse-guardrail', 'converse-stream-guardrail', 'converse-guardrail-blocked', 'apply-guardrail', 'count-tokens', 'guardrail-checks', 'us', 'us-stream', 'advisor', 'advisor-stream', 'advisor-stream-abort', 'ocr',
    'responses-image2', 'responses-priority', 'responses-priority-stream', 'responses-code', 'responses-code-stream', 'responses-code-explicit', 'responses-shell', 'code', 'code-stream', 'code-search',
    'stream-stop', 'responses-stream-stop', 'stream-break', 'stream-abort', 'responses-stream-break', 'responses-stream-abort',
    'tools', 'tools-stream', 'responses-tools', 'responses-tools-stream',
    'agent', 'agent-stream', 'agent-chat', 'agent-chat-stream', 'agent-ws', 'agent-ws-stream', 'agent-handoff', 'agent-handoff-stream', 'voice',
    'converse-stream-stop', 'converse-stream-break', 'converse-stream-abort', 'invoke-stream-stop', 'invoke-stream-break', 'invoke-stream-abort',
    'vertex-stream-stop', 'vertex-stream-break', 'vertex-stream-abort'];
  if (!scenarios.includes(scenario)) {
    throw new Error(`scenario must be one of ${scenarios.join(', ')}, not ${JSON.stringify(scenario)}`);
  }
  const need = (name) => {
    const v = process.env[name];
    if (!v) throw new Error(`${name} is not set`);
    return v;
  };
  return {
    baseURL: need('TOLLGATE_BASE_URL'),
    apiKey: need('TOLLGATE_API_KEY'),
    model: need('TOLLGATE_MODEL'),
    scenario,
  };
}

export function versionOf(pkg) {
  const url = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, 'utf8')).version;
}

// run times call(), which returns {text, model, usage, chunks}, and prints the result;
// an API error (an HTTP status) is a result too: the OpenAI, Anthropic and Google SDKs'
// (e.status, e.headers a Headers), the Mistral SDK's (e.statusCode, e.headers) and the AWS
// SDK's (e.$metadata.httpStatusCode, the headers in e.$response.headers, a plain object).
// handshakeRefused gives err, a WebSocket handshake's failure, the HTTP status the server
// refused it with (401, 429), which the ws package says only in its message
// ("Unexpected server response: 429"), and returns it; an error without one is returned
// as it is.
export function handshakeRefused(err) {
  const status = /Unexpected server response: (\d+)/.exec(String(err?.message ?? err));
  if (status && err && typeof err === 'object') err.status = Number(status[1]);
  return err;
}

// keepHome wraps fetch so that the program calls the gateway (s.baseURL's host) alone:
// a request to any other host is recorded in the array it returns ({url, memberKey}:
// its origin and path, and whether its Authorization carried the member's key) and
// answered here with an empty JSON object, never sent. Call it before the SDK is
// imported, so that every client the SDK makes uses the wrapper. (An agent framework's
// trace exporter is such a request: agents.mjs, createagent.mjs.) The test's own
// TOOL_GATE (toll) is not the program's: it is let through.
export function keepHome(s) {
  const home = [new URL(s.baseURL).host];
  if (process.env.TOOL_GATE) home.push(new URL(process.env.TOOL_GATE).host);
  const foreign = [];
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (input, init) => {
    const request = input instanceof Request ? input : undefined;
    const url = new URL(request ? request.url : input);
    if (home.includes(url.host)) return realFetch(input, init);
    const headers = new Headers(init?.headers ?? request?.headers);
    const credentials = [headers.get('authorization'), headers.get('x-api-key')].join(' ');
    foreign.push({ url: url.origin + url.pathname, memberKey: credentials.includes(s.apiKey) });
    return new Response('{}', { status: 200, headers: { 'content-type': 'application/json' } });
  };
  return foreign;
}

// payToll is the agents' one tool, pay_toll, as each framework's tool runs it: it pays
// the toll of road, noted in tolls (reported as the roads it was run for). TOOL_GATE,
// when set, is a URL it fetches first: the test holds it there while it acts between
// the agent's steps.
export const toll = {
  name: 'pay_toll',
  description: 'Pays the toll of a road.',
  tolls: [],
  async pay({ road }) {
    if (process.env.TOOL_GATE) await fetch(process.env.TOOL_GATE);
    toll.tolls.push(road);
    return { paid: true, road };
  },
};

export async function run(sdk, scenario, call) {
  const out = { sdk, sdkVersion: versionOf(sdk), node: process.version, scenario, ok: false };
  const start = performance.now();
  try {
    Object.assign(out, await call());
    out.ok = true;
    out.status = 200;
  } catch (e) {
    out.error = String(e?.message ?? e);
    const status = typeof e?.status === 'number' ? e.status : e?.statusCode ?? e?.$metadata?.httpStatusCode;
    if (typeof status === 'number') {
      out.status = status;
      // OpenAI: e.code is the body's error.code. Anthropic: e.error is the whole body.
      // Mistral: the body is e.body (a string); Google: e.message is the body.
      out.code = e.code ?? e.error?.error?.code ?? e.error?.code ?? bodyCode(e.body) ?? bodyCode(e.message) ?? null;
      const h = e.headers ?? e.$response?.headers;
      const get = (k) => {
        if (!h) return null;
        if (typeof h.get === 'function') return h.get(k);
        const name = Object.keys(h).find((n) => n.toLowerCase() === k);
        return name === undefined ? null : h[name];
      };
      out.headerCode = get('x-service-error-code');
      out.usageState = get('x-service-usage-state');
      out.headersReadable = !!h;
      out.shouldRetry = get('x-should-retry');
      out.retryAfter = get('retry-after');
      // How many times the SDK sent the call, where it says (the AI SDK's RetryError).
      if (typeof e.attempts === 'number') out.attempts = e.attempts;
    }
  }
  out.elapsedMs = Math.round(performance.now() - start);
  process.stdout.write(JSON.stringify(out) + '\n');
}

// bodyCode is the error code of an error body's JSON text ({"error": {"code": ...}}), or
// undefined.
function bodyCode(text) {
  if (typeof text !== 'string') return undefined;
  try {
    return JSON.parse(text)?.error?.code ?? undefined;
  } catch {
    return undefined;
  }
}

// chatCompletion and chatStream are one OpenAI chat completion's result, not streamed
// and streamed (text, model, usage, chunks), as the OpenAI and Azure scripts report it.
export function chatCompletion(res) {
  return { text: res.choices[0]?.message?.content ?? '', model: res.model, usage: res.usage ?? null, chunks: 1 };
}

export async function chatStream(stream) {
  let text = '';
  let model = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    model = chunk.model ?? model;
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  return { text, model, usage, chunks };
}

// leaveOf splits how a stream scenario leaves its stream off its name: "stop" (break out
// of the loop at the stream's terminal event), "break" (break out after the first text),
// "abort" (abort the request with an AbortController after the first text), "" (read it
// to its end).
export function leaveOf(scenario) {
  const m = /^(.*)-(stop|break|abort)$/.exec(scenario);
  return m ? { base: m[1], leave: m[2] } : { base: scenario, leave: '' };
}

// consume reads stream, an SDK's async iterable, giving each event to onEvent, which
// says what it was: 'text' (it carried text), 'end' (the stream's terminal event), or
// anything else. It leaves as leave says (leaveOf), controller being the request's
// AbortController; the abort's own error ends the loop quietly. It returns how the stream
// was left: 'end' (read to its end), 'stop', 'break', 'abort'.
export async function consume(stream, leave, controller, onEvent) {
  try {
    for await (const event of stream) {
      const kind = onEvent(event);
      if (leave === 'stop' && kind === 'end') return 'stop';
      if (leave === 'break' && kind === 'text') return 'break';
      if (leave === 'abort' && kind === 'text' && !controller.signal.aborted) controller.abort();
    }
  } catch (e) {
    if (leave === 'abort' && controller.signal.aborted) return 'abort';
    throw e;
  }
  return 'end';
}
