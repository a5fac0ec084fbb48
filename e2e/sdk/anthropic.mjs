// One message through the official Anthropic SDK, with its defaults (two retries, its own
// backoff, whatever headers it sends). The key is a Tollgate key, sent as x-api-key.
// See report.mjs for the settings.
import Anthropic, { toFile } from '@anthropic-ai/sdk';
import { run, settings } from './report.mjs';

const s = settings();
const client = new Anthropic({ baseURL: s.baseURL, apiKey: s.apiKey });
// 'fast' and 'fast-stream' ask for Anthropic's fast mode, as its docs call it: the beta
// client, the fast-mode beta and "speed": "fast"; 'us' and 'us-stream' for US-only
// inference (inference_geo); 'advisor' and 'advisor-stream' give the model the advisor
// tool (the beta client and the advisor beta), whose model is claude-opus-4-7;
// 'advisor-stream-abort' streams with the tool capped (max_uses 3, max_tokens 2048) and
// leaves once the first advice came (an advisor_tool_result block; text: its advice);
// 'agent-events' sends a Managed Agents session a user message (beta.sessions.events);
// 'administration' creates a memory store, writes a long memory in it, uploads a skill
// and creates a vault (beta.memoryStores, .memories, .skills, .vaults), which store and
// generate nothing (text: the four ids, comma-separated);
// 'code' and 'code-stream' give the model the code execution tool, 'code-search' beside
// web search of 2026-02-09 (with which it is free), and report the container the answer
// names (containers); 'stream-stop' streams and leaves as soon as it reads message_stop,
// the stream's terminal event (an agent's loop that breaks there: the SDK aborts the
// request before the body's end).
const code = s.scenario.startsWith('code');
const fast = s.scenario === 'fast' || s.scenario === 'fast-stream';
const us = s.scenario === 'us' || s.scenario === 'us-stream';
const abort = s.scenario === 'advisor-stream-abort';
const advisor = s.scenario === 'advisor' || s.scenario === 'advisor-stream' || abort;
const messages = fast || advisor ? client.beta.messages : client.messages;
const request = {
  model: s.model, max_tokens: 256, messages: [{ role: 'user', content: 'How are tolls paid?' }],
  ...(fast ? { speed: 'fast', betas: ['fast-mode-2026-02-01'] } : {}),
  ...(us ? { inference_geo: 'us' } : {}),
  ...(advisor ? {
    tools: [{ type: 'advisor_20260301', name: 'advisor', model: 'claude-opus-4-7', ...(abort ? { max_uses: 3, max_tokens: 2048 } : {}) }],
    betas: ['advisor-tool-2026-03-01'],
  } : {}),
  ...(code ? {
    tools: [{ type: 'code_execution_20250825', name: 'code_execution' },
      ...(s.scenario === 'code-search' ? [{ type: 'web_search_20260209', name: 'web_search' }] : [])],
  } : {}),
};

await run('@anthropic-ai/sdk', s.scenario, async () => {
  if (s.scenario === 'count') {
    // What Claude Code calls before many turns: it counts, it generates nothing.
    const res = await client.messages.countTokens({ model: s.model, messages: request.messages });
    return { text: '', model: null, usage: res, chunks: 1 };
  }
  if (s.scenario === 'administration') {
    const store = await client.beta.memoryStores.create({ name: 'tolls' });
    const memory = await client.beta.memoryStores.memories.create(store.id, {
      path: '/tolls/how-they-are-paid.md',
      content: 'Tolls are paid in tokens, by the member, at the gateway. '.repeat(2000),
    });
    const skill = await client.beta.skills.create({
      display_name: 'tolls',
      files: [await toFile(Buffer.from('---\nname: tolls\ndescription: pays tolls\n---\nPay them in tokens.\n'), 'tolls/SKILL.md')],
    });
    const vault = await client.beta.vaults.create({ display_name: 'tolls' });
    return { text: [store.id, memory.id, skill.id, vault.id].join(','), model: null, usage: null, chunks: 4 };
  }
  if (s.scenario === 'agent-events') {
    // A Managed Agents session told to work: the agent runs in Anthropic's environment,
    // billed as it goes; a Tollgate gateway refuses it (403).
    const res = await client.beta.sessions.events.send('sesn_stored0001', {
      events: [{ type: 'user.message', content: [{ type: 'text', text: 'How are tolls paid?' }] }],
    });
    return { text: JSON.stringify(res), model: null, usage: null, chunks: 1 };
  }
  if (['json', 'fast', 'us', 'advisor', 'code', 'code-search'].includes(s.scenario)) {
    const res = await messages.create(request);
    const text = res.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
    return { text, model: res.model, usage: res.usage ?? null, chunks: 1, containers: res.container ? [res.container.id] : [] };
  }
  const stream = await messages.create({ ...request, stream: true });
  let text = '';
  let model = null;
  const usage = {};
  let chunks = 0;
  const containers = [];
  for await (const event of stream) {
    chunks++;
    if (event.type === 'message_start') {
      model = event.message.model;
      Object.assign(usage, event.message.usage);
    } else if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') {
      text += event.delta.text;
    } else if (event.type === 'message_delta') {
      Object.assign(usage, event.usage);
      if (event.delta.container) containers.push(event.delta.container.id);
    } else if (event.type === 'message_stop' && s.scenario === 'stream-stop') {
      break; // aborts the request: the body's end is not waited for
    } else if (abort && event.type === 'content_block_start' && event.content_block.type === 'advisor_tool_result') {
      // Breaking out of the loop aborts the request: the rest of the answer is not read.
      return { text: event.content_block.content?.text ?? '', model, usage, chunks };
    }
  }
  return { text, model, usage, chunks, containers };
});
