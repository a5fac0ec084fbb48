// One chat completion through the official OpenAI SDK, with its defaults (two retries,
// its own backoff, whatever headers it sends), or, by scenario:
// - "responses", "responses-stream": one Responses API call; "responses-stream-stop"
//   streamed, the client leaving at response.completed; "responses-search" and
//   "responses-search-stream" with the web search tool; "responses-file-search" and
//   "responses-file-search-stream" with the file search tool; "responses-image" and
//   "responses-image-stream" with the image generation tool;
// - "image", "image-stream": an image generation; "image-stream-abort": streamed, the
//   client leaving after the first partial image; "image-timeout": not streamed, the
//   client giving up after 1 s without retrying (text: the error's name);
//   "image-edit-timeout" the same with an image edit (a multipart form);
// - "embeddings": one embeddings call, whose vectors the SDK asks as base64 and decodes;
// - "batch", "background", "video-extend": a batch, a background response or a video
//   extension, which a Tollgate gateway refuses; "retrieve": a stored response read again;
// - "conversation": a conversation created with a long first item (conversations.create),
//   then its metadata updated (conversations.update): text is the two ids, comma-separated;
// - "transcribe": an audio upload to transcribe, "transcribe-verbose" and
//   "transcribe-text" in those response formats, "transcribe-stream" streamed,
//   "translate" a translation;
// - "speech", "speech-sse": text to speech as audio and as events; "speech-opus" (aac,
//   flac, wav, pcm, mp3): as audio in that response_format;
// - "responses-ws": the Responses API's WebSocket mode (the SDK's ResponsesWS, on the ws
//   package), asking up to three responses (response.create), each after the last's
//   response.completed: usage is the list of their usage, text their text, closeCode and
//   closeReason how the session closed (1000 when the script closed it), also when it
//   closed before any response (a refused handshake is an error with its status);
// - "gpt-live": a GPT-Live session over a WebSocket (the SDK's LiveWS): session.start
//   with the model, up to three response.create events, each after its backend
//   response's response.completed (wrapped in response.event), then session.close:
//   usage is the list of the backend responses' usage, text their text, closeCode and
//   closeReason how the session closed, seconds the session's time session.closed
//   reported (0 when it did not get there);
// - "realtime": a Realtime session over a WebSocket (the SDK's OpenAIRealtimeWS, on the
//   ws package), asking up to three responses, each after the last ended: usage is the
//   list of the responses' usage, text their text, closeCode and closeReason how the
//   session closed (1000 when the script closed it);
// - "audio", "audio-stream": a chat completion that hears and speaks (modalities text and
//   audio, an input_audio part of WAV), not streamed and streamed;
// - "sequence": chat completions one after another for 4 s (text: how many).
// The key is a Tollgate key, sent as Authorization: Bearer. The stream is asked for
// WITHOUT stream_options: a client that does not ask for usage must be settled all the
// same. See report.mjs for the settings.
import net from 'node:net';
import OpenAI, { toFile } from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import { LiveWS } from 'openai/resources/live/ws';
import { ResponsesWS } from 'openai/resources/responses/ws';
import { Stream } from 'openai/streaming';
import { chatCompletion, chatStream, handshakeRefused, run, settings } from './report.mjs';

const s = settings();
// TOLLGATE_BASE_PATH, when set, replaces /v1: the path an OpenAI-compatible provider's
// clients put after its host (Databricks' /serving-endpoints).
const client = new OpenAI({ baseURL: `${s.baseURL}${process.env.TOLLGATE_BASE_PATH ?? '/v1'}`, apiKey: s.apiKey });
const messages = [{ role: 'user', content: 'How are tolls paid?' }];

await run('openai', s.scenario, async () => {
  if (s.scenario === 'count') throw new Error('"count" is an Anthropic scenario');
  if (s.scenario.startsWith('transcribe') || s.scenario === 'translate') {
    // A 1 MiB upload (multipart/form-data), which the gateway streams unread.
    const file = await toFile(Buffer.alloc(1 << 20, 7), 'toll.wav', { type: 'audio/wav' });
    if (s.scenario === 'translate') {
      const res = await client.audio.translations.create({ file, model: s.model });
      return { text: res.text, model: null, usage: res.usage ?? null, chunks: 1 };
    }
    if (s.scenario === 'transcribe-stream') {
      // transcript.text.delta events, then transcript.text.done with the usage.
      const stream = await client.audio.transcriptions.create({ file, model: s.model, stream: true });
      let text = '', usage = null, chunks = 0;
      for await (const ev of stream) {
        chunks++;
        if (ev.type === 'transcript.text.delta') text += ev.delta;
        if (ev.type === 'transcript.text.done') usage = ev.usage ?? null;
      }
      return { text, model: null, usage, chunks };
    }
    const format = { 'transcribe-verbose': 'verbose_json', 'transcribe-text': 'text' }[s.scenario];
    const res = await client.audio.transcriptions.create({ file, model: s.model, ...(format ? { response_format: format } : {}) });
    if (typeof res === 'string') return { text: res.trim(), model: null, usage: null, chunks: 1 };
    return { text: res.text, model: null, usage: res.usage ?? null, chunks: 1 };
  }
  if (s.scenario === 'speech' || s.scenario.startsWith('speech-')) {
    // Text to speech: 1,000 characters in, audio out (text: the audio's length). As audio
    // there is no usage ("speech-opus" and the like ask for that response_format); in
    // SSE (stream_format "sse") base64 deltas, then the usage.
    const input = 'Tolls are paid in tokens. '.repeat(40).slice(0, 1000);
    if (s.scenario !== 'speech-sse') {
      const format = s.scenario === 'speech' ? {} : { response_format: s.scenario.slice('speech-'.length) };
      const res = await client.audio.speech.create({ model: s.model, voice: 'alloy', input, ...format });
      const audio = Buffer.from(await res.arrayBuffer());
      return { text: String(audio.length), model: null, usage: null, chunks: 1 };
    }
    const res = await client.audio.speech.create({ model: s.model, voice: 'alloy', input, stream_format: 'sse' });
    let audio = 0, usage = null, chunks = 0;
    for await (const ev of Stream.fromSSEResponse(res, new AbortController())) {
      chunks++;
      if (ev.type === 'speech.audio.delta') audio += Buffer.from(ev.audio, 'base64').length;
      if (ev.type === 'speech.audio.done') usage = ev.usage ?? null;
    }
    return { text: String(audio), model: null, usage, chunks };
  }
  if (s.scenario === 'batch') {
    // Billed later, out of the gateway's sight: refused (403), never retried.
    const b = await client.batches.create({ input_file_id: 'file-abc123', endpoint: '/v1/chat/completions', completion_window: '24h' });
    return { text: b.id, model: null, usage: null, chunks: 1 };
  }
  if (s.scenario === 'video-extend') {
    // A video extension, billed per second when OpenAI renders it: refused (403).
    const v = await client.videos.extend({ video: { id: 'video_stored0001' }, prompt: 'The toll booth at dusk', seconds: '8' });
    return { text: v.id, model: v.model, usage: null, chunks: 1 };
  }
  if (s.scenario === 'background') {
    const res = await client.responses.create({ model: s.model, input: 'How are tolls paid?', background: true });
    return { text: res.id, model: res.model, usage: res.usage ?? null, chunks: 1 };
  }
  if (s.scenario === 'conversation') {
    // OpenAI stores the items and generates nothing: its answer is the conversation
    // object, without usage. The item is long, as a document a conversation starts from.
    const text = 'Tolls are paid in tokens, by the member, at the gateway. '.repeat(2000);
    const created = await client.conversations.create({
      items: [{ type: 'message', role: 'user', content: text }],
      metadata: { topic: 'tolls' },
    });
    const updated = await client.conversations.update(created.id, { metadata: { topic: 'tolls, paid' } });
    return { text: `${created.id},${updated.id}`, model: null, usage: null, chunks: 2 };
  }
  if (s.scenario === 'retrieve') {
    // A stored response shown again, with the usage it was charged when generated.
    const res = await client.responses.retrieve('resp_stored0001');
    return { text: res.output_text, model: res.model, usage: res.usage ?? null, chunks: 1 };
  }
  if (s.scenario === 'sequence') {
    // Chat completions one after another for 4 s, 50 ms apart, on the client's own
    // keep-alive connections: text is how many were answered, usage the first one's.
    let n = 0;
    let first = null;
    for (const end = performance.now() + 4000; performance.now() < end; n++) {
      const res = await client.chat.completions.create({ model: s.model, messages });
      first ??= res;
      await new Promise((r) => setTimeout(r, 50));
    }
    return { text: String(n), model: first.model, usage: first.usage ?? null, chunks: n };
  }
  if (s.scenario === 'embeddings') {
    // text: how many numbers the first vector decoded to.
    const res = await client.embeddings.create({ model: s.model, input: ['How are tolls paid?', 'In tokens.'] });
    return { text: `${res.data.length}x${res.data[0].embedding.length}`, model: res.model, usage: res.usage ?? null, chunks: 1 };
  }
  if (s.scenario === 'realtime') return realtimeSession();
  if (s.scenario === 'responses-ws') return responsesWebSocket();
  if (s.scenario === 'gpt-live') return gptLive();
  if (s.scenario === 'image-stream-abort') {
    // Leaves after the first partial image: breaking out of the loop aborts the request.
    const stream = await client.images.generate({ model: s.model, prompt: 'hold', size: '1024x1024', quality: 'high', stream: true, partial_images: 2 });
    let chunks = 0;
    for await (const event of stream) {
      chunks++;
      if (event.type === 'image_generation.partial_image') break;
    }
    return { text: 'left after a partial image', model: s.model, usage: null, chunks };
  }
  if (s.scenario === 'image-timeout' || s.scenario === 'image-edit-timeout') {
    const params = { model: s.model, prompt: 'hold', size: '1024x1024', quality: 'high' };
    const options = { timeout: 1000, maxRetries: 0 };
    try {
      if (s.scenario === 'image-timeout') await client.images.generate(params, options);
      // An edit: the image to edit first, the form's fields after it.
      else await client.images.edit({ image: await toFile(Buffer.alloc(64 << 10, 1), 'gate.png', { type: 'image/png' }), ...params }, options);
    } catch (err) {
      return { text: err.constructor.name, model: s.model, usage: null, chunks: 0 };
    }
    throw new Error('the image came back before the timeout');
  }
  if (s.scenario === 'image' || s.scenario === 'image-stream') {
    // An image (gpt-image-1): its answer reports tokens; streamed, partial images first.
    const params = { model: s.model, prompt: 'A toll gate at dawn', size: '1024x1024', quality: 'high' };
    if (s.scenario === 'image') {
      const res = await client.images.generate(params);
      return { text: `${res.data.length} image(s)`, model: s.model, usage: res.usage ?? null, chunks: 1 };
    }
    const stream = await client.images.generate({ ...params, stream: true, partial_images: 2 });
    let chunks = 0;
    let images = 0;
    let usage = null;
    for await (const event of stream) {
      chunks++;
      if (event.type === 'image_generation.completed') {
        images++;
        usage = event.usage;
      }
    }
    return { text: `${images} image(s)`, model: s.model, usage, chunks };
  }
  if (s.scenario.startsWith('responses')) {
    // The Responses API, what OpenAI's newer clients (Codex CLI among them) call;
    // "responses-search" and "responses-search-stream" give it the web search tool, and
    // report how many web_search_call items the SDK saw (searches); "responses-file-search"
    // and "responses-file-search-stream" the file search tool, and its file_search_call
    // items; "responses-image" and "responses-image-stream" the image generation tool
    // (a low-quality square image of gpt-image-1-mini, two partial images when streamed;
    // "responses-image2" a high-quality 2048x2048 one of gpt-image-2), and its
    // image_generation_call items; "responses-code" and "responses-code-stream"
    // the code interpreter in a container of 4 GB it opens, "responses-code-explicit" in
    // one created apart (cntr_stored0001), and its code_interpreter_call items, with the
    // containers they name (containers); "responses-shell" the hosted shell in a 16 GB
    // container, and its shell_call items. "responses-priority" and
    // "responses-priority-stream" ask for service_tier "priority", and report the tier
    // the answer says it ran at (tier). "responses-stream-stop" streams and leaves as
    // soon as it reads response.completed, the stream's terminal event (an agent's loop
    // that breaks there: the SDK aborts the request before the body's end).
    const params = { model: s.model, input: 'How are tolls paid?' };
    const fileSearch = s.scenario.includes('-file-search');
    const image = s.scenario.includes('-image');
    const code = s.scenario.includes('-code');
    if (fileSearch) params.tools = [{ type: 'file_search', vector_store_ids: ['vs_tolls'] }];
    else if (s.scenario === 'responses-image2') {
      params.tools = [{ type: 'image_generation', model: 'gpt-image-2', size: '2048x2048', quality: 'high' }];
    } else if (image) {
      params.tools = [{ type: 'image_generation', model: 'gpt-image-1-mini', size: '1024x1024', quality: 'low', partial_images: 2 }];
    } else if (code) {
      const container = s.scenario.endsWith('-explicit') ? 'cntr_stored0001' : { type: 'auto', memory_limit: '4g' };
      params.tools = [{ type: 'code_interpreter', container }];
    } else if (s.scenario === 'responses-shell') {
      params.tools = [{ type: 'shell', environment: { type: 'container_auto', memory_limit: '16g' } }];
    } else if (s.scenario.includes('-search')) params.tools = [{ type: 'web_search' }];
    if (s.scenario.startsWith('responses-priority')) params.service_tier = 'priority';
    const callType = fileSearch ? 'file_search_call' : image ? 'image_generation_call' : code ? 'code_interpreter_call'
      : s.scenario === 'responses-shell' ? 'shell_call' : 'web_search_call';
    const searchesIn = (output) => output.filter((item) => item.type === callType).length;
    const containerOf = (item) => item.container_id ?? item.environment?.container_id;
    const containersIn = (output) => [...new Set(output.map(containerOf).filter(Boolean))];
    const stop = s.scenario === 'responses-stream-stop';
    if (!s.scenario.endsWith('-stream') && !stop) {
      const res = await client.responses.create(params);
      return {
        text: res.output_text, model: res.model, usage: res.usage ?? null, chunks: 1, searches: searchesIn(res.output),
        containers: containersIn(res.output), tier: res.service_tier ?? null,
      };
    }
    const stream = await client.responses.create({ ...params, stream: true });
    let text = '';
    let model = null;
    let usage = null;
    let chunks = 0;
    let searches = 0;
    let containers = [];
    let tier = null;
    for await (const event of stream) {
      chunks++;
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') {
        model = event.response.model;
        tier = event.response.service_tier ?? null;
        usage = event.response.usage;
        searches = searchesIn(event.response.output);
        containers = containersIn(event.response.output);
        if (stop) break; // aborts the request: the body's end is not waited for
      }
    }
    return { text, model, usage, chunks, searches, containers, tier };
  }
  if (s.scenario === 'audio' || s.scenario === 'audio-stream') {
    // 0.1 s of silence, 16-bit mono at 8 kHz, as a WAV file.
    const pcm = Buffer.alloc(1600);
    const wav = Buffer.alloc(44);
    wav.write('RIFF', 0); wav.writeUInt32LE(36 + pcm.length, 4); wav.write('WAVEfmt ', 8);
    wav.writeUInt32LE(16, 16); wav.writeUInt16LE(1, 20); wav.writeUInt16LE(1, 22); wav.writeUInt32LE(8000, 24);
    wav.writeUInt32LE(16000, 28); wav.writeUInt16LE(2, 32); wav.writeUInt16LE(16, 34); wav.write('data', 36); wav.writeUInt32LE(pcm.length, 40);
    const heard = [{ role: 'user', content: [{ type: 'text', text: 'What do you hear?' },
      { type: 'input_audio', input_audio: { data: Buffer.concat([wav, pcm]).toString('base64'), format: 'wav' } }] }];
    const req = { model: s.model, modalities: ['text', 'audio'], audio: { voice: 'alloy', format: 'wav' }, messages: heard };
    if (s.scenario === 'audio') return chatCompletion(await client.chat.completions.create(req));
    return chatStream(await client.chat.completions.create({ ...req, stream: true }));
  }
  if (s.scenario === 'json') {
    return chatCompletion(await client.chat.completions.create({ model: s.model, messages }));
  }
  return chatStream(await client.chat.completions.create({ model: s.model, messages, stream: true }));
});

async function realtimeSession() {
  // The SDK always dials wss://. The tests' gateway listens in plain HTTP (in production
  // a TLS front such as Caddy hands it the session): over http://, the socket is plain
  // TCP (ws's createConnection), and everything else is the SDK's own.
  const options = {};
  if (s.baseURL.startsWith('http://')) {
    options.createConnection = (o) => net.connect({ host: o.host, port: Number(o.port) });
  }
  const rt = new OpenAIRealtimeWS({ model: s.model, options }, client);
  const errors = [];
  rt.on('error', (e) => errors.push(String(e?.message ?? e)));
  const closed = new Promise((resolve) => rt.socket.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  // A refused handshake (401, 429, ...) is an HTTP answer: reported as run() reports a
  // refused call (status, headerCode).
  const refused = new Promise((resolve) => rt.socket.on('unexpected-response', (req, res) => {
    resolve(res);
    req.destroy();
  }));
  const opened = new Promise((resolve) => rt.socket.on('open', () => resolve(null)));
  const failed = closed.then((c) => { throw new Error(`the session closed before it opened (${c.code}): ${errors.join('; ')}`); });
  const res = await Promise.race([opened, refused, failed]);
  if (res) {
    const err = new Error(`the handshake was answered ${res.statusCode}`);
    err.status = res.statusCode;
    err.headers = { get: (k) => res.headers[k.toLowerCase()] ?? null };
    throw err;
  }
  let text = '';
  rt.on('response.output_text.delta', (e) => { text += e.delta; });
  const usage = [];
  for (let i = 0; i < 3; i++) {
    rt.send({ type: 'response.create' });
    const done = await Promise.race([rt.emitted('response.done'), closed.then(() => null)]);
    if (!done) break;
    usage.push(done.response.usage);
  }
  rt.close({ code: 1000, reason: 'done' });
  const c = await closed;
  return { text, model: s.model, usage, chunks: usage.length, closeCode: c.code, closeReason: c.reason };
}

async function responsesWebSocket() {
  const ws = new ResponsesWS(client);
  const errors = [];
  ws.on('error', (e) => errors.push(String(e?.message ?? e)));
  const closed = new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: String(reason ?? '') })));
  let text = '';
  ws.on('response.output_text.delta', (e) => { text += e.delta; });
  const usage = [];
  let model = null;
  for (let i = 0; i < 3; i++) {
    ws.send({ type: 'response.create', model: s.model, input: messages[0].content });
    // A refused handshake (401, 429) fails the wait (openai 7: before, only closed it).
    const done = await Promise.race([ws.emitted('response.completed'), closed.then(() => null)])
      .catch((e) => { throw handshakeRefused(e); });
    if (!done) break;
    usage.push(done.response.usage);
    model = done.response.model;
  }
  if (usage.length === 0) {
    // A refused handshake (401, 429) closes the socket before it opens; ws says the
    // status in its error ("Unexpected server response: 429"). A session that opened and
    // was closed before any response (its first response.create refused) says how.
    const c = await closed;
    const status = /Unexpected server response: (\d+)/.exec(errors.join(' '));
    if (!status) return { text, model, usage, chunks: 0, closeCode: c.code, closeReason: c.reason };
    const err = new Error(`the session closed before a response (${c.code}): ${errors.join('; ')}`);
    err.status = Number(status[1]);
    throw err;
  }
  ws.close({ code: 1000, reason: 'done' });
  const c = await closed;
  return { text, model, usage, chunks: usage.length, closeCode: c.code, closeReason: c.reason };
}

async function gptLive() {
  const ws = new LiveWS(client);
  const errors = [];
  ws.on('error', (e) => errors.push(String(e?.message ?? e)));
  const closed = new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: String(reason ?? '') })));
  let text = '';
  const usage = [];
  let seconds = 0;
  ws.on('response.event', (e) => {
    if (e.event?.type === 'response.output_text.delta') text += e.event.delta;
  });
  const backendDone = () => new Promise((resolve) => {
    const on = (e) => {
      if (e.event?.type !== 'response.completed') return;
      ws.off('response.event', on);
      resolve(e.event.response);
    };
    ws.on('response.event', on);
  });
  const race = (p) => Promise.race([p, closed.then(() => null)]).catch((e) => { throw handshakeRefused(e); });
  ws.send({ type: 'session.start', session: { model: s.model } });
  if (await race(ws.emitted('session.started'))) {
    for (let i = 0; i < 3; i++) {
      const done = backendDone();
      ws.send({ type: 'response.create' });
      const response = await race(done);
      if (!response) break;
      usage.push(response.usage);
    }
    const c = await Promise.race([closed.then(() => null), (async () => {
      ws.send({ type: 'session.close' });
      return ws.emitted('session.closed');
    })()]);
    if (c) seconds = c.usage.seconds;
  }
  if (usage.length === 0 && /Unexpected server response/.test(errors.join(' '))) throw handshakeRefused(new Error(errors.join('; ')));
  ws.close({ code: 1000, reason: 'done' });
  const c = await closed;
  return { text, model: s.model, usage, chunks: usage.length, seconds, closeCode: c.code, closeReason: c.reason };
}
