// One OCR call through the official Mistral SDK (@mistralai/mistralai), with its defaults:
// "ocr" reads a document by its URL (ocr.process), which Mistral bills by the page its
// answer reports (usageInfo.pagesProcessed). The key is a Tollgate key, sent as
// Authorization: Bearer. See report.mjs for the settings.
import { Mistral } from '@mistralai/mistralai';
import { run, settings } from './report.mjs';

const s = settings();
const client = new Mistral({ apiKey: s.apiKey, serverURL: s.baseURL });

await run('@mistralai/mistralai', s.scenario, async () => {
  if (s.scenario !== 'ocr') throw new Error(`${s.scenario} is not a Mistral scenario`);
  const res = await client.ocr.process({
    model: s.model,
    document: { type: 'document_url', documentUrl: 'https://example.com/toll-rates.pdf' },
  });
  return { text: res.pages.map((p) => p.markdown).join('\n'), model: res.model, usage: res.usageInfo, chunks: res.pages.length };
});
