// One call through the official Mistral SDK (@mistralai/mistralai), with its defaults:
// "stream" (chat.stream, and "stream-stop", "stream-break", "stream-abort": report.mjs's
// leaveOf) and "ocr", which reads a document by its URL (ocr.process), which Mistral bills by the page its
// answer reports (usageInfo.pagesProcessed). The key is a Tollgate key, sent as
// Authorization: Bearer. See report.mjs for the settings.
import { Mistral } from '@mistralai/mistralai';
import { consume, leaveOf, run, settings } from './report.mjs';

const s = settings();
const client = new Mistral({ apiKey: s.apiKey, serverURL: s.baseURL });

await run('@mistralai/mistralai', s.scenario, async () => {
  const { base, leave } = leaveOf(s.scenario);
  if (base === 'stream') {
    // chat.stream: the SDK itself stops reading at data: [DONE] (it cancels the body);
    // "stream-stop" leaves at the chunk with the usage and the finish reason,
    // "stream-break" after the first text, "stream-abort" aborts the request there.
    const controller = new AbortController();
    const stream = await client.chat.stream({ model: s.model, messages: [{ role: 'user', content: 'How are tolls paid?' }] },
      { fetchOptions: { signal: controller.signal } });
    let text = '';
    let model = null;
    let usage = null;
    let chunks = 0;
    const left = await consume(stream, leave, controller, (event) => {
      chunks++;
      const c = event.data;
      model = c.model ?? model;
      if (c.usage) usage = c.usage;
      const delta = c.choices?.[0]?.delta?.content ?? '';
      text += typeof delta === 'string' ? delta : '';
      return c.usage && c.choices?.[0]?.finishReason ? 'end' : delta ? 'text' : '';
    });
    return { text, model, usage, chunks, left };
  }
  if (s.scenario !== 'ocr') throw new Error(`${s.scenario} is not a Mistral scenario`);
  const res = await client.ocr.process({
    model: s.model,
    document: { type: 'document_url', documentUrl: 'https://example.com/toll-rates.pdf' },
  });
  return { text: res.pages.map((p) => p.markdown).join('\n'), model: res.model, usage: res.usageInfo, chunks: res.pages.length };
});
