package responseusage

import (
	"bytes"
	"unicode/utf8"
)

// Output text: where a response carries the text the model generated, so
// that a response whose usage is missing can still be estimated from it.
//
// A string at one of these paths counts its decoded bytes; the object (or
// array) at a raw path counts its JSON text as sent. "[]" is any element of
// an array.
//
//	choices[].text                                    legacy completions
//	choices[].delta.content / message.content         chat, streamed / not
//	choices[].delta.refusal / message.refusal
//	choices[].delta.reasoning / .reasoning_content    reasoning of OpenAI-compatible servers
//	choices[].delta.tool_calls[].function.arguments   (and message.tool_calls[]...)
//	choices[].delta.function_call.arguments           (and message.function_call...)
//	choices[].delta.audio.transcript                  (and message.audio...): an answer in audio
//	delta                                             Responses events response.*.delta but audio;
//	                                                  transcriptions' transcript.text.delta
//	output[].content[].text / .refusal                Responses, not streamed
//	output[].arguments                                Responses function_call, not streamed
//	output[].input / output[].code                    ... custom_tool_call, code_interpreter_call
//	output[].summary[].text                           Responses reasoning summary, not streamed
//	delta.text / .partial_json / .thinking            Anthropic content_block_delta
//	delta.content                                     ... its compaction_delta (a summary)
//	content[].text / .thinking                        Anthropic, not streamed
//	content[].input (raw)                             Anthropic tool_use, not streamed
//	candidates[].content.parts[].text                 Gemini, streamed or not
//	candidates[].content.parts[].functionCall.args (raw)  its function calls
//	candidates[].content.parts[].executableCode.code  the code its code execution ran
//	output.message.content[].text                     Bedrock Converse, not streamed
//	                                                  (ConverseStream: delta.text)
//	output.message.content[].reasoningContent.reasoningText.text
//	                                                  its thinking (ConverseStream:
//	                                                  delta.reasoningContent.text)
//	output.message.content[].toolUse.input (raw)      its tool calls' arguments
//	                                                  (ConverseStream: delta.toolUse.input)
//	generation                                        Bedrock InvokeModelWithResponseStream: Meta Llama
//	contentBlockDelta.delta.text                      ... Amazon Nova
//	contentBlockDelta.delta.reasoningContent.text     ... its thinking
//	contentBlockDelta.delta.toolUse.input             ... its tool calls' arguments
//	outputs[].text                                    ... Mistral
//	outputText                                        ... Amazon Titan
//	content / content.text / content.thinking[].text  Mistral's Conversations stream:
//	arguments                                         message.output.delta and
//	                                                  function.call.delta (isTextDelta)
//	outputs[].content / .content[].text               Mistral's Conversations answer, not
//	outputs[].content[].thinking[].text               streamed
//	outputs[].arguments
//
// A streamed response's text is read from its deltas only: the full text
// that a terminal event repeats (response.completed's response.output,
// response.output_text.done, transcript.text.done) is not under these paths,
// so it is not counted twice.
//
// The top-level "text" of a non-streamed transcription or translation (OpenAI's
// audio endpoints) is not counted either. A top-level "text" is also what
// those terminal events repeat; and whisper-1 is billed by the duration of its
// input audio, so its text, counted, would estimate output tokens that are
// not billed when its body is cut before the usage. A gpt-4o-transcribe body
// cut before its usage has no text to be estimated from, then; streamed, its
// transcript.text.delta events count. So Cohere's events through Bedrock's
// InvokeModelWithResponseStream, whose text is a top-level "text", are not counted: such
// a stream cut before its last chunk (its invocation metrics) has no text to estimate
// its output from. Complete, it is charged its metrics as every model's is.

// textTarget names what the value about to start at the current path adds
// to the output text.
func (s *scanner) textTarget() uint8 {
	k := &s.keys
	switch s.depth {
	case 1:
		switch k[0] {
		case kDelta:
			return txDelta
		case kContent, kArguments:
			// Mistral's Conversations stream: a message.output.delta's content, a
			// function.call.delta's arguments (isTextDelta: not another event's).
			return txDelta
		case kGeneration, kOutputText:
			// Bedrock's InvokeModelWithResponseStream of Meta's Llama ({"generation": ...})
			// and Amazon's Titan ({"outputText": ...}): counted so that a stream cut before
			// its last chunk's invocation metrics is estimated from its text.
			return txText
		}
	case 2:
		if k[0] == kDelta && (k[1] == kText || k[1] == kPartialJSON || k[1] == kThinking) {
			return txText
		}
		if k[0] == kDelta && k[1] == kContent {
			// Anthropic's compaction_delta: a compaction's summary, output it bills (its
			// iteration's, reported only in the last message_delta). Since 2026-12-07;
			// before, a stream cut after it was estimated from its answer's text alone.
			return txText
		}
		if k[0] == kContent && k[1] == kText {
			return txDelta // a message.output.delta's text chunk
		}
	case 3:
		if k[0] == kContentBlockDelta && k[1] == kDelta && k[2] == kText {
			// Amazon Nova's, through Bedrock's InvokeModelWithResponseStream (its
			// ConverseStream event, wrapped in the event's name).
			return txText
		}
		if k[0] == kDelta && (k[1] == kReasoningContentCamel && k[2] == kText || k[1] == kToolUse && k[2] == kInput) {
			// ConverseStream's thinking and tool call arguments: output it bills, as
			// Anthropic's thinking and partial_json are (since 2026-12-03; before, a
			// stream cut before its metadata was estimated from its answer's text alone).
			return txText
		}
		if k[1] != kArr {
			break
		}
		switch {
		case k[0] == kChoices && k[2] == kText,
			k[0] == kContent && (k[2] == kText || k[2] == kThinking),
			k[0] == kOutput && k[2] == kArguments,
			// A Responses answer's custom tool call's input and code interpreter call's
			// code (not streamed; streamed, their deltas count).
			k[0] == kOutput && (k[2] == kInput || k[2] == kCode),
			k[0] == kOutputs && k[2] == kText, // Mistral's, through Bedrock's InvokeModelWithResponseStream
			// Mistral's Conversations answer, not streamed: a message's content, a
			// function call's arguments.
			k[0] == kOutputs && (k[2] == kContent || k[2] == kArguments):
			return txText
		case k[0] == kContent && k[2] == kInput:
			return txRaw
		}
	case 4:
		if k[0] == kContent && k[1] == kThinking && k[2] == kArr && k[3] == kText {
			return txDelta // a message.output.delta's thinking chunk
		}
		if k[0] == kContentBlockDelta && k[1] == kDelta && (k[2] == kReasoningContentCamel && k[3] == kText || k[2] == kToolUse && k[3] == kInput) {
			// Amazon Nova's thinking and tool call arguments through Bedrock's
			// InvokeModelWithResponseStream (ConverseStream's, wrapped in the event's
			// name): output it bills, as ConverseStream's are (since 2026-12-07; before,
			// a Nova stream cut before its last chunk was estimated from its text alone,
			// a tool call's arguments free).
			return txText
		}
		if isChoice(k) {
			switch k[3] {
			case kContent, kRefusal, kReasoning, kReasoningContent:
				return txText
			}
		}
	case 5:
		if k[0] == kChoices && k[1] == kArr && k[2] == kDelta && k[3] == kAudio && k[4] == kData {
			// A streamed answer in audio: its base64 PCM16, whose length is its duration
			// (Usage.AudioOutputMillis), from which a stream cut before its usage is
			// estimated. Not streamed, its audio comes whole with the usage (and may be
			// another format).
			return txAudio
		}
		switch {
		case isChoice(k) && k[3] == kFunctionCall && k[4] == kArguments,
			// An answer in audio (modalities ["audio"]): its content stays null, its
			// transcript is the text the audio speaks.
			isChoice(k) && k[3] == kAudio && k[4] == kTranscript,
			k[0] == kOutput && k[1] == kArr && k[2] == kContent && k[3] == kArr && (k[4] == kText || k[4] == kRefusal),
			k[0] == kOutput && k[1] == kArr && k[2] == kSummary && k[3] == kArr && k[4] == kText,
			k[0] == kOutput && k[1] == kMessage && k[2] == kContent && k[3] == kArr && k[4] == kText,
			// Mistral's Conversations answer, not streamed: a message's text chunk.
			k[0] == kOutputs && k[1] == kArr && k[2] == kContent && k[3] == kArr && k[4] == kText:
			return txText
		}
	case 6:
		if k[0] == kCandidates && k[1] == kArr && k[2] == kContent && k[3] == kParts && k[4] == kArr && k[5] == kText {
			return txText
		}
		if k[0] == kOutput && k[1] == kMessage && k[2] == kContent && k[3] == kArr && k[4] == kToolUse && k[5] == kInput {
			return txRaw // a Converse tool call's arguments, an object
		}
	case 7:
		if isChoice(k) && k[3] == kToolCalls && k[4] == kArr && k[5] == kFunction && k[6] == kArguments {
			return txText
		}
		if k[0] == kCandidates && k[1] == kArr && k[2] == kContent && k[3] == kParts && k[4] == kArr {
			switch {
			case k[5] == kFunctionCall && k[6] == kArgs:
				return txRaw // a Gemini function call's arguments, an object
			case k[5] == kExecutableCode && k[6] == kCode:
				return txText // the code Gemini's code execution tool ran
			}
		}
		if k[0] == kOutput && k[1] == kMessage && k[2] == kContent && k[3] == kArr && k[4] == kReasoningContentCamel &&
			k[5] == kReasoningText && k[6] == kText ||
			// Mistral's Conversations answer, not streamed: a message's thinking chunk.
			k[0] == kOutputs && k[1] == kArr && k[2] == kContent && k[3] == kArr && k[4] == kThinking && k[5] == kArr && k[6] == kText {
			return txText // a Converse answer's thinking
		}
	}
	return txNone
}

// isChoice: the path starts with choices[].delta or choices[].message.
func isChoice(k *[maxPath]uint8) bool {
	return k[0] == kChoices && k[1] == kArr && (k[2] == kDelta || k[2] == kMessage)
}

// isTextDelta reports whether an event's top-level "delta" string is output
// text: an OpenAI Responses event response.*.delta (output text, refusal,
// reasoning, function-call arguments...) other than response.audio.delta,
// whose delta is base64 audio, or a streamed transcription's
// transcript.text.delta. Or whether its top-level content (a string, a text
// chunk's text, a thinking chunk's texts) or arguments are: Mistral's Conversations
// stream's message.output.delta and function.call.delta (since 2026-12-03; before,
// such a stream cut before its conversation.response.done was charged no output).
// An event has one or the other, so they share the count (docFields.delta).
func isTextDelta(typ *capture) bool {
	switch {
	case !typ.ok:
		return false
	case string(typ.b) == "transcript.text.delta", string(typ.b) == "message.output.delta", string(typ.b) == "function.call.delta":
		return true
	}
	return bytes.HasPrefix(typ.b, []byte("response.")) && bytes.HasSuffix(typ.b, []byte(".delta")) &&
		string(typ.b) != "response.audio.delta"
}

// docText is the output text of a complete document.
func docText(d *docFields) int64 {
	if isTextDelta(&d.typ) {
		return d.text + d.delta
	}
	return d.text
}

// utf8Count counts the bytes a string's raw (unescaped) parts decode to as
// encoding/json decodes them: valid UTF-8 as it is, and each byte that does
// not start a valid sequence as U+FFFD (3 bytes). A sequence split across
// chunks waits in it for its next bytes.
type utf8Count struct {
	first byte  // first byte of an unfinished sequence
	have  uint8 // bytes of it seen; 0 when none
	need  uint8 // its length
}

// count returns the decoded bytes of the sequences p completes.
func (u *utf8Count) count(p []byte) int64 {
	if u.have == 0 && utf8.Valid(p) {
		return int64(len(p))
	}
	var n int64
	for _, c := range p {
		if u.have > 0 {
			lo, hi := byte(0x80), byte(0xbf)
			if u.have == 1 {
				lo, hi = secondByteRange(u.first)
			}
			if lo <= c && c <= hi {
				if u.have++; u.have == u.need {
					n += int64(u.need)
					u.have = 0
				}
				continue
			}
			// Not a valid sequence: its first byte and the continuation
			// bytes after it are each U+FFFD, and c starts afresh.
			n += 3 * int64(u.have)
			u.have = 0
		}
		switch l := seqLen(c); l {
		case 1:
			n++
		case 0:
			n += 3
		default:
			u.first, u.have, u.need = c, 1, l
		}
	}
	return n
}

// end is called where the raw part ends (a quote or an escape): an
// unfinished sequence is U+FFFD for each of its bytes.
func (u *utf8Count) end() int64 {
	n := 3 * int64(u.have)
	u.have = 0
	return n
}

// seqLen is the length of the UTF-8 sequence that c starts: 0 when c cannot
// start one.
func seqLen(c byte) uint8 {
	switch {
	case c < 0x80:
		return 1
	case c < 0xc2:
		return 0
	case c < 0xe0:
		return 2
	case c < 0xf0:
		return 3
	case c < 0xf5:
		return 4
	}
	return 0
}

// secondByteRange is the range of the second byte of a sequence started by
// first, which excludes overlong forms, surrogates and code points past
// U+10FFFF.
func secondByteRange(first byte) (byte, byte) {
	switch first {
	case 0xe0:
		return 0xa0, 0xbf
	case 0xed:
		return 0x80, 0x9f
	case 0xf0:
		return 0x90, 0xbf
	case 0xf4:
		return 0x80, 0x8f
	}
	return 0x80, 0xbf
}
