// What langchain.mjs and createagent.mjs read off LangChain's messages and errors alike.

// textOf is a message's text: a string, or its text blocks (the Responses API's and
// Anthropic's content may be blocks).
export function textOf(content) {
  if (typeof content === 'string') return content;
  return content.map((b) => (b.type === 'text' ? b.text : '')).join('');
}

// modelOf is the model a message's response named (OpenAI's model_name, Anthropic's
// model), or null.
export function modelOf(message) {
  return message.response_metadata?.model_name ?? message.response_metadata?.model ?? null;
}

// unwrapped gives an error LangChain rethrew report.mjs's names: the SDK's error keeps
// its status and headers; the 429's body code is in its error. An agent's middleware
// wraps a model call's error (langchain's MiddlewareError): the SDK's is its cause.
export function unwrapped(e) {
  if (e && typeof e === 'object' && typeof e.status !== 'number' && typeof e.cause?.status === 'number') return e.cause;
  if (e && typeof e === 'object' && typeof e.status !== 'number' && typeof e.response?.status === 'number') {
    e.status = e.response.status;
    e.headers = e.response.headers;
  }
  return e;
}
