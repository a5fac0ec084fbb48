// One chat completion through the official OpenAI SDK's Azure client (AzureOpenAI), with
// its defaults (two retries, its own backoff, whatever headers it sends): its key in
// api-key (here the member's Tollgate key), the endpoint at the gateway, so that it
// calls /openai/deployments/{deployment}/chat/completions?api-version=2024-10-21, the
// deployment being TOLLGATE_MODEL. Scenarios: "json" and "stream" (asked WITHOUT
// stream_options, as openai.mjs does), and "stream-2024-06-01", the same stream at
// api-version 2024-06-01, a version from before stream_options that programs of 2024
// still name. See report.mjs for the settings.
import { AzureOpenAI } from 'openai';
import { chatCompletion, chatStream, run, settings } from './report.mjs';

const s = settings();
const apiVersion = s.scenario === 'stream-2024-06-01' ? '2024-06-01' : '2024-10-21';
const client = new AzureOpenAI({ endpoint: s.baseURL, apiKey: s.apiKey, apiVersion, deployment: s.model });
const messages = [{ role: 'user', content: 'How are tolls paid?' }];

await run('openai', s.scenario, async () => {
  if (s.scenario === 'json') {
    return chatCompletion(await client.chat.completions.create({ model: s.model, messages }));
  }
  if (s.scenario !== 'stream' && s.scenario !== 'stream-2024-06-01') throw new Error(`"${s.scenario}" is not an Azure OpenAI scenario`);
  return chatStream(await client.chat.completions.create({ model: s.model, messages, stream: true }));
});
