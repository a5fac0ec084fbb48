// One Gemini call through Google's official Gen AI SDK (@google/genai), with its
// defaults: its key in x-goog-api-key (here the member's Tollgate key), the base URL at
// the gateway. Scenarios: "json" (generateContent), "stream" (generateContentStream,
// server-sent events), "search" and "search-stream" (the same with Grounding with Google
// Search; searches is how many queries, of the web and of images, the answer lists), "maps" and "maps-stream" (the
// same with Grounding with Google Maps; places is how many maps sources it cites), "priority" and
// "priority-stream" (the same at Google's priority inference: config.serviceTier) and
// "count" (countTokens, which Google does not charge). See report.mjs for the settings.
import { GoogleGenAI } from '@google/genai';
import { run, settings } from './report.mjs';

const s = settings();
const ai = new GoogleGenAI({ apiKey: s.apiKey, httpOptions: { baseUrl: s.baseURL } });
const contents = 'How are tolls paid?';

await run('@google/genai', s.scenario, async () => {
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
  if (!['stream', 'search-stream', 'maps-stream', 'priority-stream'].includes(s.scenario)) throw new Error(`"${s.scenario}" is not a Gemini scenario`);
  let text = '';
  let model = null;
  let usage = null;
  let chunks = 0;
  let searches = 0;
  let places = 0;
  for await (const chunk of await ai.models.generateContentStream({ model: s.model, contents, config })) {
    chunks++;
    text += chunk.text ?? '';
    model = chunk.modelVersion ?? model;
    if (chunk.usageMetadata) usage = chunk.usageMetadata;
    searches = Math.max(searches, searchesIn(chunk));
    places = Math.max(places, placesIn(chunk));
  }
  return { text, model, usage, chunks, searches, places };
});
