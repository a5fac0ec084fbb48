// One Gemini call through Google's official Gen AI SDK (@google/genai), with its
// defaults: its key in x-goog-api-key (here the member's Tollgate key), the base URL at
// the gateway. Scenarios: "json" (generateContent), "stream" (generateContentStream,
// server-sent events), "search" and "search-stream" (the same with Grounding with Google
// Search; searches is how many queries, of the web and of images, the answer lists), "maps" and "maps-stream" (the
// same with Grounding with Google Maps; places is how many maps sources it cites), "priority" and
// "priority-stream" (the same at Google's priority inference: config.serviceTier),
// "count" (countTokens, which Google does not charge) and "live" (a Live API session,
// ai.live.connect, its key in the URL's query as the SDK sends it: up to three turns, each
// after the last's usageMetadata; usage is the list of the turns' usage, text their text
// parts, closeCode and closeReason how the session closed, 1000 when the script closed
// it), "interactions" and "interactions-stream" (the Interactions API, ai.interactions.create
// with input: a whole Interaction, its usage; or its events, text from the step.delta
// text deltas, usage from interaction.completed's interaction) and
// "interactions-background" (the same run in the background, stored: billed later, the
// gateway refuses it), "interactions-auth-token" and "interactions-webrtc" (a Live
// Interaction's auth token, ai.interactions.authTokens.create, and its WebRTC signaling,
// ai.interactions.connect with the SDK's WebRTC transport on a stand-in peer connection
// that makes an SDP offer: after either, the client talks to Google itself, billed
// where the gateway cannot see it, so the gateway refuses both) and "interactions-live"
// (a Live Interaction over the SDK's WebSocket, /{version}/interactions/live, which the
// gateway cannot read yet: refused at the handshake). See report.mjs for the settings.
import { GoogleGenAI, InteractionWebRTCTransport, Modality } from '@google/genai';
import { consume, handshakeRefused, leaveOf, run, settings } from './report.mjs';

const s = settings();
const ai = new GoogleGenAI({ apiKey: s.apiKey, httpOptions: { baseUrl: s.baseURL } });
const contents = 'How are tolls paid?';

await run('@google/genai', s.scenario, async () => {
  if (s.scenario === 'live') return liveSession();
  if (s.scenario.startsWith('interactions')) return interaction();
  if (s.scenario === 'count') {
    const res = await ai.models.countTokens({ model: s.model, contents });
    return { text: '', model: null, usage: { totalTokens: res.totalTokens }, chunks: 1 };
  }
  const search = s.scenario === 'search' || s.scenario === 'search-stream';
  const maps = s.scenario === 'maps' || s.scenario === 'maps-stream';
  const priority = s.scenario === 'priority' || s.scenario === 'priority-stream';
  const config = search ? { tools: [{ googleSearch: {} }] } : maps ? { tools: [{ googleMaps: {} }] } : priority ? { serviceTier: 'priority' } : undefined;
  const searchesIn = (res) => {
    const g = res?.candidates?.[0]?.groundingMetadata;
    return (g?.webSearchQueries?.length ?? 0) + (g?.imageSearchQueries?.length ?? 0);
  };
  const placesIn = (res) => (res?.candidates?.[0]?.groundingMetadata?.groundingChunks ?? []).filter((c) => c.maps).length;
  if (['json', 'search', 'maps', 'priority'].includes(s.scenario)) {
    const res = await ai.models.generateContent({ model: s.model, contents, config });
    return { text: res.text ?? '', model: res.modelVersion ?? null, usage: res.usageMetadata ?? null, chunks: 1, searches: searchesIn(res), places: placesIn(res) };
  }
  const { base, leave } = leaveOf(s.scenario);
  if (!['stream', 'search-stream', 'maps-stream', 'priority-stream'].includes(base)) throw new Error(`"${s.scenario}" is not a Gemini scenario`);
  let text = '';
  let model = null;
  let usage = null;
  let chunks = 0;
  let searches = 0;
  let places = 0;
  // "stream-stop" leaves at the chunk with a finishReason (the last, though nothing in
  // the event stream says so), "stream-break" after the first text, "stream-abort" aborts
  // the request there (config.abortSignal).
  const controller = new AbortController();
  const left = await consume(await ai.models.generateContentStream({ model: s.model, contents, config: { ...config, abortSignal: controller.signal } }), leave, controller, (chunk) => {
    chunks++;
    text += chunk.text ?? '';
    model = chunk.modelVersion ?? model;
    if (chunk.usageMetadata) usage = chunk.usageMetadata;
    searches = Math.max(searches, searchesIn(chunk));
    places = Math.max(places, placesIn(chunk));
    return chunk.candidates?.[0]?.finishReason ? 'end' : chunk.text ? 'text' : '';
  });
  return { text, model, usage, chunks, searches, places, left };
});

async function liveSession() {
  let closedResolve;
  const closed = new Promise((resolve) => { closedResolve = resolve; });
  const errors = [];
  let onTurn = null;
  let text = '';
  const connecting = ai.live.connect({
    model: s.model,
    config: { responseModalities: [Modality.AUDIO], outputAudioTranscription: {} },
    callbacks: {
      onmessage: (m) => {
        for (const p of m.serverContent?.modelTurn?.parts ?? []) text += p.text ?? '';
        if (m.usageMetadata && onTurn) {
          const done = onTurn;
          onTurn = null;
          done(m.usageMetadata);
        }
      },
      onerror: (e) => errors.push(String(e?.message ?? e)),
      onclose: (e) => closedResolve({ code: e.code, reason: String(e.reason ?? '') }),
    },
  });
  // A refused handshake (401, 429) ends the socket before it opens: the SDK's connect
  // fails (since @google/genai 3: before, it never returned), and ws says the status in
  // its error ("Unexpected server response: 429").
  const session = await Promise.race([connecting.catch((e) => { throw handshakeRefused(e); }), closed.then((c) => {
    const err = new Error(`the session closed before it opened (${c.code}): ${errors.join('; ')}`);
    const status = /Unexpected server response: (\d+)/.exec(errors.join(' '));
    if (status) err.status = Number(status[1]);
    throw err;
  })]);
  const usage = [];
  for (let i = 0; i < 3; i++) {
    const turn = new Promise((resolve) => { onTurn = resolve; });
    session.sendClientContent({ turns: [{ role: 'user', parts: [{ text: contents }] }], turnComplete: true });
    const u = await Promise.race([turn, closed.then(() => null)]);
    if (!u) break;
    usage.push(u);
  }
  session.close();
  const c = await closed;
  return { text, model: s.model, usage, chunks: usage.length, closeCode: c.code, closeReason: c.reason };
}

async function interaction() {
  if (s.scenario === 'interactions-auth-token') {
    const res = await ai.interactions.authTokens.create('int_e2e');
    return { text: res.auth_token ?? '', model: null, usage: null, chunks: 1 };
  }
  if (s.scenario === 'interactions-webrtc') return webrtcInteraction();
  if (s.scenario === 'interactions-live') {
    try {
      const connection = await ai.interactions.connect('int_e2e', { transport: 'websocket' });
      connection.detach();
      return { text: '', model: null, usage: null, chunks: 1 };
    } catch (e) {
      throw withHTTPStatus(handshakeRefused(e));
    }
  }
  if (s.scenario === 'interactions' || s.scenario === 'interactions-background') {
    const background = s.scenario === 'interactions-background' ? { background: true, store: true } : {};
    const res = await ai.interactions.create({ model: s.model, input: contents, ...background });
    return { text: res.output_text ?? '', model: res.model ?? null, usage: res.usage ?? null, chunks: 1 };
  }
  if (s.scenario !== 'interactions-stream') throw new Error(`"${s.scenario}" is not a Gemini scenario`);
  let text = '';
  let model = null;
  let usage = null;
  let chunks = 0;
  for await (const event of await ai.interactions.create({ model: s.model, input: contents, stream: true })) {
    chunks++;
    if (event.event_type === 'step.delta' && event.delta?.type === 'text') text += event.delta.text ?? '';
    if (event.event_type === 'interaction.created' || event.event_type === 'interaction.completed') model = event.interaction?.model ?? model;
    if (event.event_type === 'interaction.completed') usage = event.interaction?.usage ?? null;
  }
  return { text, model, usage, chunks };
}

// webrtcInteraction connects a live interaction over the SDK's WebRTC transport. Node has
// no RTCPeerConnection: the transport's factory for tests gets one that makes an SDP
// offer and nothing else, enough for the SDK to send its signaling request (POST
// /{version}/interactions/{id}:webrtc). A refusal's status and error code are those of
// the SDK's APIWebRTCError (httpStatus, serverCode).
async function webrtcInteraction() {
  const channel = { readyState: 'connecting', binaryType: 'blob', label: 'events', close() {}, send() {},
    addEventListener() {}, removeEventListener() {} };
  const pc = {
    connectionState: 'new', iceConnectionState: 'new', localDescription: null, sctp: null,
    addEventListener() {}, removeEventListener() {}, addTrack() { return {}; }, addTransceiver() { return { sender: {} }; },
    createDataChannel() { return channel; },
    async createOffer() { return { type: 'offer', sdp: 'v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n' }; },
    async setLocalDescription(d) { this.localDescription = d; },
    async setRemoteDescription() {},
    close() { this.connectionState = 'closed'; },
  };
  const transport = new InteractionWebRTCTransport({ peerConnectionFactory: () => pc });
  try {
    const connection = await ai.interactions.connect('int_e2e', { transport });
    connection.detach();
    return { text: '', model: null, usage: null, chunks: 1 };
  } catch (e) {
    throw withHTTPStatus(e);
  }
}

// withHTTPStatus gives a Live Interaction's transport error (APIWebRTCError,
// APIWebSocketError: httpStatus, serverCode) the status and code report.mjs reads.
function withHTTPStatus(e) {
  if (typeof e?.httpStatus === 'number' && typeof e.status !== 'number') Object.assign(e, { status: e.httpStatus, code: e.serverCode ?? null });
  return e;
}
