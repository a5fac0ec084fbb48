package responseusage

import (
	"math"
	"slices"

	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/saturate"
)

// The accumulator turns the documents the scanner read into one usage: it
// recognises the shape of each document, keeps the model and, for each
// count, the largest value the shape's usage reports gave, adds up the
// output text, and normalises the counts at the end.

type family uint8

const (
	famNone family = iota
	famChat
	famResponses
	famAnthropic
	famEmbeddings
	famGemini
	// famAudioDuration: a JSON body whose usage is a duration of input audio
	// (whisper-1's {"type":"duration","seconds":N}), never streamed.
	famAudioDuration
	// famTranscription: the transcript.text.* events of a streamed
	// transcription, whose usage has the Responses API's count names.
	famTranscription
	// famSpeech: the speech.audio.* events of a speech answer in SSE
	// (gpt-4o-mini-tts with stream_format "sse"): base64 audio deltas, then
	// speech.audio.done with the usage, in the Responses API's count names.
	famSpeech
	// famImage: the image_generation.* (image_edit.*) events of a streamed image
	// (gpt-image-1 with stream=true): partial images, then *.completed with the
	// usage, in the Responses API's count names.
	famImage
	// famConverse: Amazon Bedrock's Converse (its JSON, or ConverseStream's metadata
	// event): usage in camelCase, counted as Anthropic counts (input without the cache).
	famConverse
	// famOCR: Mistral's OCR answer (POST /v1/ocr), one JSON document whose usage is the
	// pages its model read (usage_info.pages_processed), billed apiece; never streamed.
	famOCR
	// famConversation: OpenAI's conversation object (object "conversation"), the answer
	// of its conversations' create and update (POST /v1/conversations, /v1/conversations/{id}),
	// which store items and generate nothing: no usage, nothing billed. Never streamed.
	famConversation
	nFam
)

// How the documents came (accumulator.shape), which names the format (formats).
const (
	shapeJSON  uint8 = iota // one JSON body
	shapeSSE                // the events of a stream (SSE, or AWS's event stream)
	shapeArray              // the elements of a top-level JSON array (applyElement)
	nShape
)

type accumulator struct {
	fam   family
	shape uint8
	final bool // the shape's final usage report was seen
	// tier: the dearest speed tier a document of the shape said the request ran at
	// (noteTier); regional: one said it ran in a geography (Usage.Regional).
	// tier is tierUnsaid until a document names one; Flex while each that named one
	// named flex (noteSaid).
	tier     pricecatalog.Tier
	regional bool
	// hasCost: a document's usage reported the cost (OpenRouter's usage.cost), the
	// largest of a stream's in cost, micro-USD, whatever the shape.
	hasCost bool
	// hasCachedAudio: a document reported the audio part of its cached count (Gemini's
	// cacheTokensDetails), the largest of a stream's in cachedAudio: a field apart from
	// u's counts, as docFields.cachedAudio is, for the Extractor's size class. In a chat
	// completions stream (famChat), which reports no such count, cachedAudio sums its
	// chunks' audio instead (docFields.cachedAudio: base64 characters; fill).
	hasCachedAudio bool
	// mapsGrounded: a Gemini document's grounding cited a Google Maps source
	// (docFields.mapsGrounded), which bills the prompt once.
	mapsGrounded bool
	// fileSearches counts the calls of OpenAI's file search tool (see noteSearches),
	// saturating at 65,535 as a document's count does; imageCalls the calls of its
	// image generation tool alike.
	// The small fields come first, together, in one word: the Extractor stays in its
	// size class (TestExtractorSize).
	fileSearches, imageCalls uint16
	// The web search calls of an OpenAI Responses stream (webSearches), each saturating
	// at 65,535 (of an Anthropic stream, searchEvents counts its web_search_tool_result
	// blocks that are no error instead: searchResults): searchEvents counts its
	// response.web_search_call.completed events, one
	// per web_search_call item whatever its action; doneSearches and donePages the
	// web_search_call items of its response.output_item.done events, by action (a
	// search, or none; another), and listedPages the most items of another action a
	// document's response.output[] listed (the searches it listed are in u's
	// tokWebSearches, noteSearches). addedItems counts the web_search_call items of its
	// response.output_item.added events, which carry no action yet: like the completion
	// events, they count every item whatever its action.
	searchEvents uint16
	addedItems   uint16
	doneSearches uint16
	donePages    uint16
	listedPages  uint16
	// advisorResults counts an Anthropic stream's advisor_tool_result blocks (the advisor
	// tool's consultations done), saturating at 65,535.
	advisorResults uint16
	cost           int64
	cachedAudio    int64
	model          capture
	u              usageFields
	text           int64 // output text of every document, whatever its shape
	// imageToolIn and imageToolCached are the input of OpenAI's image generation tool and
	// its cached part (noteImageTool), the largest a Responses document reported: fields
	// of their own, not slots of u, whose merges take in whatever a Responses usage holds.
	imageToolIn, imageToolCached int64
	// containers are the distinct containers the documents of an OpenAI Responses or
	// Anthropic shape named (docFields.containers), at most maxContainers.
	containers []string
	// guard sums what the documents' guardrail assessments billed (docFields.guard),
	// whatever their shape (a guardrail that refused the prompt answers no usage of the
	// model's); nil until one reported a count (0 too).
	guard *pricecatalog.GuardrailUnits
}

// noteGuardrails adds what a document's guardrail assessments billed. Each document
// reports assessments of its own: Converse's answer, ConverseStream's metadata event,
// InvokeModel's answer or its stream's last chunk.
func (a *accumulator) noteGuardrails(d *docFields) {
	if d.guard == nil || !d.guard.seen {
		return
	}
	if a.guard == nil {
		a.guard = &pricecatalog.GuardrailUnits{}
	}
	*a.guard = a.guard.Add(d.guard.units)
}

func (a *accumulator) switchTo(f family) {
	if a.fam != f {
		a.fam = f
		a.model.reset()
		a.u = usageFields{}
		a.final = false
		a.tier, a.regional = tierUnsaid, false
		a.fileSearches, a.imageCalls, a.mapsGrounded, a.advisorResults = 0, 0, false, 0
		a.searchEvents, a.doneSearches, a.donePages, a.listedPages = 0, 0, 0, 0
		a.hasCachedAudio, a.cachedAudio = false, 0
		a.imageToolIn, a.imageToolCached = 0, 0
		a.containers = a.containers[:0]
	}
}

// noteContainers keeps the containers an OpenAI Responses or Anthropic document named
// (docFields.containers): their code tools' containers, billed by the time each lives.
// Another shape's "container_id" is none of theirs.
func (a *accumulator) noteContainers(d *docFields) {
	if a.fam != famResponses && a.fam != famAnthropic {
		return
	}
	for _, id := range d.containers {
		if len(a.containers) < maxContainers && !slices.Contains(a.containers, id) {
			a.containers = append(a.containers, id)
		}
	}
}

func (a *accumulator) setModel(m *capture) {
	if m.ok && len(m.b) > 0 {
		a.model.reset()
		a.model.add(m.b)
		a.model.ok = !a.model.over
	}
}

func (u *usageFields) hasTok(t int) bool { return u.has&(1<<t) != 0 }

// sseFamily recognises one event's document and names the root its model
// sits under.
func sseFamily(d *docFields) (family, int) {
	switch {
	case d.typ.is("message_start"):
		return famAnthropic, rootMessage
	case d.typ.is("message_delta"), d.typ.is("message_stop"), d.typ.is("content_block_start"),
		d.typ.is("content_block_delta"), d.typ.is("content_block_stop"), d.typ.is("ping"):
		return famAnthropic, rootTop
	case d.typ.ok && len(d.typ.b) > len("response.") && string(d.typ.b[:len("response.")]) == "response.":
		return famResponses, rootResponse
	case d.typ.ok && len(d.typ.b) > len("transcript.text.") && string(d.typ.b[:len("transcript.text.")]) == "transcript.text.":
		return famTranscription, rootTop
	case d.typ.ok && len(d.typ.b) > len("speech.audio.") && string(d.typ.b[:len("speech.audio.")]) == "speech.audio.":
		return famSpeech, rootTop
	case d.typ.ok && (len(d.typ.b) > len("image_generation.") && string(d.typ.b[:len("image_generation.")]) == "image_generation." ||
		len(d.typ.b) > len("image_edit.") && string(d.typ.b[:len("image_edit.")]) == "image_edit."):
		return famImage, rootTop
	case d.object.is("chat.completion.chunk"), d.object.is("text_completion"):
		return famChat, rootTop
	case d.typ.is("message.output.delta"), d.typ.is("function.call.delta"):
		// Mistral's Conversations stream: the events that name the model (a
		// continuation's or an agent's request names none), its usage to come in
		// conversation.response.done, read by its counts as a chat usage.
		return famChat, rootTop
	case d.typ.is("interaction.created") || d.typ.is("interaction.completed"):
		// The Gemini API's Interactions API: its lifecycle events carry the interaction
		// (its model; at the end, its usage). Its other events (step.*,
		// interaction.status_update) carry the usage so far at their top level.
		return famGemini, rootResponse
	case isGeminiUsage(&d.usage[rootTop]):
		return famGemini, rootTop
	case d.trafficSaid && d.usage[rootTop].obj && d.usage[rootTop].has == 0 && !d.converse:
		// Vertex AI's chunks before its last carry a usageMetadata of their trafficType
		// alone ({"trafficType": "ON_DEMAND_PRIORITY"}), no count: Gemini's all the same,
		// whose tier and model a stream cut before its last chunk is charged at (since
		// 2026-12-07; before, such a stream was charged the standard price whatever its
		// chunks said).
		return famGemini, rootTop
	case d.converse:
		return famConverse, rootTop
	case d.usage[rootTop].obj && (d.usage[rootTop].hasTok(tokPrompt) || d.usage[rootTop].hasTok(tokCompletion)):
		return famChat, rootTop
	}
	return famNone, 0
}

// isGeminiUsage tells a Gemini usageMetadata by its counts (no other API names them so).
func isGeminiUsage(u *usageFields) bool {
	return u.obj && (u.hasTok(tokGeminiPrompt) || u.hasTok(tokGeminiCandidates) || u.hasTok(tokGeminiThoughts) || u.hasTok(tokGeminiCached))
}

func isResponseTerminal(d *docFields) bool {
	return d.typ.is("response.completed") || d.typ.is("response.incomplete") || d.typ.is("response.failed")
}

// endsStream tells whether d is the terminal event of its family's stream, after which
// its protocol sends nothing the answer bills (sseReader.endEvent): the Responses API's
// response.completed, response.incomplete and response.failed; Anthropic's
// message_stop (after message_delta, the final report); a streamed transcription's
// transcript.text.done, speech's speech.audio.done, an image's
// image_generation.completed (image_edit.completed); the Interactions API's
// interaction.completed; ConverseStream's metadata event, the one with its usage, which
// comes after messageStop. A chat completions stream ends with "[DONE]" (sseReader), and
// a Gemini stream has no terminal event: the chunk with its finishReason is the last,
// but nothing says so until the body ends.
func endsStream(d *docFields) bool {
	switch fam, _ := sseFamily(d); fam {
	case famResponses:
		return isResponseTerminal(d)
	case famAnthropic:
		return d.typ.is("message_stop")
	case famTranscription:
		return d.typ.is("transcript.text.done")
	case famSpeech:
		return d.typ.is("speech.audio.done")
	case famImage:
		// Not image_generation.completed (image_edit.completed): whether a stream of n
		// images sends one per image is not documented, and ending at the first would
		// settle the rest complete at the first's usage. Such a stream broken off stays
		// incomplete, its output estimated from its n (never below).
		return false
	case famGemini:
		return d.typ.is("interaction.completed")
	case famConverse:
		u := &d.usage[rootTop]
		return u.obj && u.hasTok(tokInput) && u.hasTok(tokOutput)
	}
	return false
}

// applySSE takes in one complete JSON value of an event stream. Every usage
// report of the stream's shape is merged: each count keeps the largest value
// reported (an OpenAI chunk's "usage": null reports nothing; Anthropic's
// message_delta counts are cumulative, so the largest is the latest), and a
// later, smaller report never lowers one. Once the final report was seen the
// usage stays final.
func (a *accumulator) applySSE(d *docFields) {
	a.shape = shapeSSE
	a.applyEvent(d)
}

// applyElement takes in one element of a JSON body that is a top-level array. Gemini's
// streamGenerateContent without alt=sse streams the chunks of its event stream so (each
// element a GenerateContentResponse): a Gemini chunk is read as the same chunk of an
// event stream is (applySSE). Any other element only adds its output text, as an event
// of no shape does: no other API answers with an array of its usage reports, and a
// usage in one is not read.
func (a *accumulator) applyElement(d *docFields) {
	a.shape = shapeArray
	if fam, _ := sseFamily(d); fam != famGemini {
		a.text += docText(d)
		return
	}
	a.applyEvent(d)
}

// applyEvent takes in one document of a stream (applySSE).
func (a *accumulator) applyEvent(d *docFields) {
	a.text += docText(d)
	a.noteCost(d)
	a.noteGuardrails(d)
	fam, root := sseFamily(d)
	if fam == famNone {
		return
	}
	a.switchTo(fam)
	a.setModel(&d.model[root])
	a.noteTier(d, root)
	switch fam {
	case famChat:
		if !d.hasCachedAudio {
			a.cachedAudio = saturate.Add(a.cachedAudio, d.cachedAudio) // its answer's audio (see hasCachedAudio)
		}
		if u := &d.usage[rootTop]; u.obj {
			a.u.merge(u)
			a.final = a.final || (u.hasTok(tokPrompt) && u.hasTok(tokCompletion))
		}
	case famResponses:
		if u := &d.usage[rootResponse]; u.obj {
			a.u.merge(u)
			a.final = a.final || (isResponseTerminal(d) && u.hasTok(tokInput) && u.hasTok(tokOutput))
		}
		// The web search tool's calls: each one's completion event, and the output
		// items (each item's done event, the response an event carries: the terminal
		// one lists them all), whichever counts more (webSearches).
		if d.typ.is("response.web_search_call.completed") {
			a.searchEvents = saturate16(a.searchEvents, 1)
		}
		if d.typ.is("response.output_item.done") {
			a.doneSearches = saturate16(a.doneSearches, d.searches)
			a.donePages = saturate16(a.donePages, d.pageActions)
		}
		if d.typ.is("response.output_item.added") {
			a.addedItems = saturate16(a.addedItems, saturate16(d.searches, d.pageActions))
		}
		a.listedPages = max(a.listedPages, d.pageActions)
		if d.typ.is("response.file_search_call.completed") && a.fileSearches < math.MaxUint16 {
			a.fileSearches++
		}
		// An image is counted once its generation began: a stream cut before its
		// completion may still be billed for it.
		if d.typ.is("response.image_generation_call.in_progress") && a.imageCalls < math.MaxUint16 {
			a.imageCalls++
		}
		a.noteSearches(d)
		a.noteContainers(d)
		a.noteImageTool(d)
	case famTranscription, famSpeech, famImage:
		// transcript.text.done (speech.audio.done, image_generation.completed,
		// image_edit.completed) ends the stream with the usage of the whole
		// transcription (speech, image).
		if u := &d.usage[rootTop]; u.obj {
			a.u.merge(u)
			a.final = a.final || ((d.typ.is("transcript.text.done") || d.typ.is("speech.audio.done") ||
				d.typ.is("image_generation.completed") || d.typ.is("image_edit.completed")) &&
				u.hasTok(tokInput) && u.hasTok(tokOutput))
		}
	case famConverse:
		// ConverseStream's metadata event reports the usage of the whole answer.
		if u := &d.usage[rootTop]; u.obj {
			a.u.merge(u)
			a.final = a.final || (u.hasTok(tokInput) && u.hasTok(tokOutput))
		}
	case famGemini:
		// Every chunk reports the usage so far; the one whose candidate gives its
		// finishReason is the last (a blocked prompt's one chunk, its promptFeedback's
		// blockReason; the Interactions API's: interaction.completed).
		u := &d.usage[root]
		a.u.merge(u)
		a.noteCachedAudio(d)
		a.final = a.final || ((d.finished || d.typ.is("interaction.completed")) && u.hasTok(tokGeminiPrompt))
		a.noteSearches(d)
	case famAnthropic:
		a.noteIterations(d)
		a.noteContainers(d)
		if d.advisorResult && !d.resultFailed && d.typ.is("content_block_start") && a.advisorResults < math.MaxUint16 {
			a.advisorResults++
		}
		if d.webSearchResult && !d.resultFailed && d.typ.is("content_block_start") {
			a.searchEvents = saturate16(a.searchEvents, 1) // a search done (searchResults)
		}
		switch {
		case d.typ.is("message_start"):
			if u := &d.usage[rootMessage]; u.obj {
				a.u.merge(u)
			}
		case d.typ.is("message_delta"):
			if u := &d.usage[rootTop]; u.obj {
				a.u.merge(u)
				a.final = a.final || u.hasTok(tokOutput)
			}
		}
	}
}

// jsonFamily recognises a non-streamed body.
func jsonFamily(d *docFields) family {
	switch {
	case d.object.is("chat.completion"), d.object.is("text_completion"):
		return famChat
	case d.object.is("response"):
		return famResponses
	case d.typ.is("message"):
		return famAnthropic
	case d.object.is("conversation") && !d.usage[rootTop].obj:
		return famConversation
	}
	u := &d.usage[rootTop]
	switch {
	case !u.obj:
		return famNone
	case isGeminiUsage(u):
		return famGemini
	case d.converse:
		return famConverse
	case u.has == 1<<tokAudioSeconds:
		// whisper-1's transcriptions and translations: billed per minute of
		// input audio, their usage is its duration and nothing else. A usage that
		// also has a token count is read by its tokens (gpt-4o-transcribe's
		// input_tokens and output_tokens: openai-responses), its seconds unread.
		return famAudioDuration
	case u.has == 1<<tokPages:
		// Mistral's OCR: the pages read, and no token count.
		return famOCR
	case d.object.is("list") && u.hasTok(tokPrompt) && !u.hasTok(tokCompletion):
		// OpenAI's embeddings (and the APIs that copy them): a list of vectors whose
		// usage counts input alone, since an embedding model generates nothing.
		return famEmbeddings
	case u.hasTok(tokPrompt) || u.hasTok(tokCompletion):
		return famChat
	case u.hasTok(tokCacheRead) || u.hasTok(tokCacheCreation):
		return famAnthropic
	case u.hasTok(tokInput) || u.hasTok(tokOutput):
		return famResponses
	}
	return famNone
}

// fromJSON takes in the (only) document of a JSON body; wellFormed says it
// was one complete JSON value.
func (a *accumulator) fromJSON(d *docFields, wellFormed bool) {
	a.shape = shapeJSON
	a.text += docText(d)
	a.noteCost(d)
	a.noteGuardrails(d)
	a.switchTo(jsonFamily(d))
	if a.fam == famNone {
		return
	}
	a.setModel(&d.model[rootTop])
	a.noteTier(d, rootTop)
	a.u = d.usage[rootTop]
	if a.fam == famAnthropic {
		a.noteIterations(d)
	}
	a.noteCachedAudio(d)
	a.noteSearches(d)
	a.noteContainers(d)
	if a.fam == famResponses {
		a.noteImageTool(d)
	}
	a.final = wellFormed
}

// noteImageTool keeps the usage of OpenAI's image generation tool a Responses document
// reported (its tool_usage.image_gen, in rootImageTool): its input and the cached part,
// each the largest of a stream's, as the counts of usage are (a count not reported is 0).
func (a *accumulator) noteImageTool(d *docFields) {
	u := &d.usage[rootImageTool]
	in, _ := u.get(tokImageToolInput)
	cached, _ := u.get(tokImageToolCached)
	a.imageToolIn, a.imageToolCached = max(a.imageToolIn, in), max(a.imageToolCached, cached)
}

// noteCachedAudio keeps the audio part of the cached count a document reported
// (docFields.cachedAudio): like the counts of usage, the largest of a stream's, and read
// for Gemini's shape alone (fill).
func (a *accumulator) noteCachedAudio(d *docFields) {
	if d.hasCachedAudio {
		keepLargest(&a.cachedAudio, &a.hasCachedAudio, d.cachedAudio)
	}
}

// noteSearches keeps the web searches a Responses or Gemini document lists (the
// web_search_call output items, the grounding's search queries), the largest of a
// stream's documents: OpenAI bills its web search tool per call, Google its Search
// grounding per query (or per grounded prompt), on top of the tokens, and neither
// usage counts them.
func (a *accumulator) noteSearches(d *docFields) {
	// An item just added has no action yet: a search only perhaps (webSearches).
	added := a.fam == famResponses && d.typ.is("response.output_item.added")
	if (a.fam == famResponses || a.fam == famGemini) && d.searches > 0 && !added {
		a.u.setMax(tokWebSearches, int64(d.searches))
	}
	if a.fam == famResponses {
		a.fileSearches = max(a.fileSearches, d.fileSearches)
		a.imageCalls = max(a.imageCalls, d.imageCalls)
	}
	if a.fam == famGemini {
		a.mapsGrounded = a.mapsGrounded || d.mapsGrounded
	}
}

// saturate16 adds two counts of a stream's, saturating at 65,535.
func saturate16(a, b uint16) uint16 {
	if a > math.MaxUint16-b {
		return math.MaxUint16
	}
	return a + b
}

// webSearches is the web search calls an OpenAI Responses stream is charged: OpenAI bills
// the web_search_call items whose action is a search (or that have none, the older
// shape), not a reasoning model's open_page and find_in_page items. The items, where
// seen, say which each is: the searches are the most the response.output[] of a
// document listed or the output_item.done events counted. The completion events
// (response.web_search_call.completed) and the items just added
// (response.output_item.added, before their action) do not say the action: they count
// every item, and those known to be of another action are taken off them. The charge is
// the larger of the two, so that a stream cut before its items were listed is charged
// every call it saw begin or complete (never 0 for a call it saw), and one that listed
// them its searches alone.
func (a *accumulator) webSearches() int64 {
	listed, _ := a.u.get(tokWebSearches)
	searches := max(listed, int64(a.doneSearches))
	unknown := int64(max(a.searchEvents, a.addedItems)) - int64(max(a.listedPages, a.donePages))
	return max(searches, unknown)
}

// searchResults is the searches an Anthropic stream's web_search_tool_result blocks
// showed, the errors left out (Anthropic bills no failed search): the accumulator's
// searchEvents, which an OpenAI stream's completion events take in that family.
func (a *accumulator) searchResults() int64 { return int64(a.searchEvents) }

// noteCost keeps the cost a document's usage reported (docFields.billedCost), the
// largest of a stream's.
func (a *accumulator) noteCost(d *docFields) {
	if c, ok := d.billedCost(); ok {
		keepLargest(&a.cost, &a.hasCost, c)
	}
}

// The accumulator's slots of the sums of Anthropic's usage.iterations[] entries billed
// apart (docFields' rootIterations): an Anthropic usage has no Gemini counts, whose slots
// they take.
const (
	tokIterInput      = tokGeminiPrompt
	tokIterOutput     = tokGeminiCandidates
	tokIterCacheRead  = tokGeminiCached
	tokIterCacheWrite = tokGeminiThoughts
	// tokIterCacheWrite1h: the part of tokIterCacheWrite made for an hour; its audio
	// slot is no count of an Anthropic usage (fill reads audio of other families).
	tokIterCacheWrite1h = tokAudioIn
)

// noteIterations keeps the sums of an Anthropic document's usage.iterations[] entries
// that its top-level counts leave out (compaction: the server-side summary of a closed
// context; advisor_message: an advisor model's sub-inference), the largest of a stream's:
// message_delta's usage is cumulative.
func (a *accumulator) noteIterations(d *docFields) {
	it := &d.usage[rootIterations]
	for _, m := range [...]struct{ from, to int }{{tokInput, tokIterInput}, {tokOutput, tokIterOutput},
		{tokCacheRead, tokIterCacheRead}, {tokCacheCreation, tokIterCacheWrite},
		{tokAdvisorInput, tokAdvisorInput}, {tokAdvisorOutput, tokAdvisorOutput},
		{tokAdvisorCacheRead, tokAdvisorCacheRead}, {tokAdvisorCacheWrite, tokAdvisorCacheWrite},
		{tokCacheWritePart, tokIterCacheWrite1h}, {tokAdvisorCacheWrite1h, tokAdvisorCacheWrite1h}} {
		if v, ok := it.get(m.from); ok {
			a.u.setMax(m.to, v)
		}
	}
}

// tierUnsaid is accumulator.tier before any document named a tier: Standard to fill,
// and below Flex, which only a first say of it sets (noteSaid).
const tierUnsaid = pricecatalog.Flex - 1

// noteSaid notes a document that named tier t: the dearest said wins, and Flex holds
// only while every document that named a tier named flex (another, standard included,
// says the request did not run at flex).
func (a *accumulator) noteSaid(t pricecatalog.Tier) {
	if t == pricecatalog.Flex {
		if a.tier == tierUnsaid {
			a.tier = pricecatalog.Flex
		}
		return
	}
	a.tier = max(a.tier, t)
}

// isFlex tells whether c names the tier below standard (pricecatalog.FlexNames).
func isFlex(c *capture) bool {
	for _, n := range pricecatalog.FlexNames {
		if c.is(n.Name) {
			return true
		}
	}
	return false
}

// noteTier keeps the dearest speed tier a document said the request ran at: an
// OpenAI document's (chat, Responses) service_tier of pricecatalog.TierNames, an
// Anthropic one's usage.speed "fast", a Gemini one's usageMetadata.trafficType
// ON_DEMAND_PRIORITY (Vertex AI) or serviceTier "priority" (the Gemini API), a Bedrock
// Converse one's serviceTier.type "priority" or performanceConfig.latency "optimized".
// Any one of a stream's saying so is enough, but for a Responses stream's terminal
// event's service_tier, which says the tier the response ran at whatever its earlier
// events echoed of the request's; so for an Anthropic usage's inference_geo
// naming a geography (a.regional).
//
// The tier below standard (pricecatalog.Flex) is the answer's only where every document
// that named a tier named flex and none said a dearer one (fill): an OpenAI chat
// answer's or chunks' service_tier "flex", a Responses answer's or terminal event's (its
// stream's earlier events echo the request's ask, which is not charged: a stream cut
// before its terminal event is standard), a Gemini one's usageMetadata.trafficType
// ON_DEMAND_FLEX (Vertex AI's Flex PayGo) or serviceTier "flex" (the Gemini API). Not
// Bedrock's serviceTier.type "flex", charged as standard (AWS publishes no ratio).
func (a *accumulator) noteTier(d *docFields, root int) {
	tier := &d.tier[root]
	switch a.fam {
	case famChat, famResponses:
		said := pricecatalog.Standard
		for _, n := range pricecatalog.TierNames {
			if tier.is(n.Name) {
				said = n.Tier
			}
		}
		whole := a.fam == famResponses && (isResponseTerminal(d) || a.shape == shapeJSON)
		if isFlex(tier) && (a.fam == famChat || whole) {
			said = pricecatalog.Flex
		}
		if whole && tier.ok {
			// A Responses stream's earlier events (response.created, .in_progress) echo
			// the tier the request asked for; its terminal event says the one it ran at
			// ("default" when a fast request ran at the standard speed, and was billed
			// so), which wins. A stream cut before it keeps the dearest said (an echoed
			// "flex" is standard).
			a.tier = said
			return
		}
		if tier.ok {
			a.noteSaid(said)
		}
	case famAnthropic:
		for _, n := range pricecatalog.SpeedNames {
			if tier.is(n.Name) {
				a.tier = max(a.tier, n.Tier)
			}
		}
		// Its inference_geo ("us": US-only inference, 1.1 times the price).
		a.regional = a.regional || d.geoPinned
	case famGemini, famConverse:
		if d.trafficSaid {
			said := d.traffic
			if a.fam == famConverse && said == pricecatalog.Flex {
				said = pricecatalog.Standard // Bedrock's flex: no published ratio
			}
			a.noteSaid(said)
		}
		// Bedrock Converse's performanceConfig.latency "optimized".
		if d.latency != pricecatalog.Standard {
			a.tier = max(a.tier, d.latency)
		}
	}
}

// formats names the shape of each family, not streamed, streamed, then streamed as a
// JSON array (Gemini's alone: applyElement). Embeddings and audio durations are not
// streamed; a non-streamed transcription or image that counts tokens is read as
// openai-responses (its usage has the Responses API's names).
var formats = [nShape][nFam]string{
	shapeJSON: {"", FormatOpenAIChat, FormatOpenAIResponses, FormatAnthropicMessages, FormatOpenAIEmbeddings, FormatGemini, FormatOpenAIAudioDuration, "", "", "",
		FormatBedrockConverse, FormatMistralOCR, FormatOpenAIConversation},
	shapeSSE: {"", FormatOpenAIChatSSE, FormatOpenAIResponsesSSE, FormatAnthropicSSE, "", FormatGeminiSSE, "", FormatOpenAITranscriptionSSE, FormatOpenAISpeechSSE, FormatOpenAIImageSSE,
		FormatBedrockConverseStream},
	shapeArray: {famGemini: FormatGeminiJSONStream},
}

// fill writes the normalised usage into u. u.Complete is set as if the
// stream ended normally.
func (a *accumulator) fill(u *Usage) {
	u.TextBytes = a.text
	if a.hasCost && u.CostMicroUSD == nil {
		// A cost header (already in u) wins over the body's.
		c := a.cost
		u.CostMicroUSD = &c
	}
	if a.guard != nil {
		u.Guardrail, u.GuardrailReported = *a.guard, true
	}
	if a.fam == famNone {
		return
	}
	u.Tier, u.Regional = a.tier, a.regional
	if a.tier == tierUnsaid {
		u.Tier = pricecatalog.Standard
	}
	u.Format = formats[a.shape][a.fam]
	if a.model.ok {
		u.Model = string(a.model.b)
	}
	if a.fam == famConversation {
		// Nothing generated: no count to report, and the whole answer is its report.
		u.Complete = a.final
		return
	}
	if a.fam == famAudioDuration || a.fam == famOCR {
		// A model billed by a unit of its own (the duration of its input audio, the
		// pages it read) has no token counts: the unit is the whole report, and its
		// counts are 0.
		tok, dst := tokAudioSeconds, &u.AudioInputMillis
		if a.fam == famOCR {
			tok, dst = tokPages, &u.OCRPages
		}
		n, ok := a.u.get(tok)
		*dst = n
		u.InputReported, u.OutputReported = ok, ok
		u.Complete = a.final && ok
		return
	}
	var inTok, outTok, cachedTok int
	switch a.fam {
	case famChat:
		inTok, outTok, cachedTok = tokPrompt, tokCompletion, tokCachedPrompt
	case famResponses, famTranscription, famSpeech, famImage:
		inTok, outTok, cachedTok = tokInput, tokOutput, tokCachedInput
	case famAnthropic, famConverse:
		inTok, outTok, cachedTok = tokInput, tokOutput, tokCacheRead
	case famEmbeddings:
		inTok, outTok, cachedTok = tokPrompt, tokCompletion, tokCachedPrompt
	case famGemini:
		inTok, outTok, cachedTok = tokGeminiPrompt, tokGeminiCandidates, tokGeminiCached
	}
	in, hasIn := a.u.get(inTok)
	out, hasOut := a.u.get(outTok)
	switch a.fam {
	case famChat:
		// OpenAI counts a reasoning model's thinking in completion_tokens, and its
		// total_tokens is prompt + completion; xAI leaves the thinking out of
		// completion_tokens and counts it in total_tokens (and bills it as output). The
		// output is at least what the total leaves beyond the prompt.
		if total, ok := a.u.get(tokTotal); ok && hasIn && hasOut && total-in > out {
			out = total - in
		}
	case famEmbeddings:
		// Nothing is generated: the input count is the whole report, its output 0.
		out, hasOut = 0, hasIn
	case famGemini:
		// Gemini leaves a count of 0 out (proto3 JSON), and bills its thinking as
		// output: the output is candidates + thoughts, reported with the input.
		thoughts, _ := a.u.get(tokGeminiThoughts)
		if out > math.MaxInt64-thoughts {
			out, hasOut = 0, false
		} else {
			out, hasOut = out+thoughts, hasIn
		}
		// The results of its tools given back to the model (toolUsePromptTokenCount)
		// are input it bills, apart from promptTokenCount.
		if toolUse, ok := a.u.get(tokGeminiToolUse); ok && hasIn {
			in = saturate.Add(in, toolUse)
		}
	}
	cached, hasCached := a.u.get(cachedTok)
	if a.fam == famChat && !hasCached && hasIn {
		// DeepSeek reports its cache hits as prompt_cache_hit_tokens, a part of
		// prompt_tokens: the cached input when prompt_tokens_details.cached_tokens does
		// not say it (never the two added), never more than the input.
		hits, _ := a.u.get(tokCacheHit)
		cached = min(hits, in)
	}
	if a.fam == famAnthropic || a.fam == famResponses || a.fam == famGemini {
		// Web searches are billed apart: Anthropic's usage.server_tool_use.
		// web_search_requests, OpenAI's web_search_call output items, Gemini's
		// grounding search queries.
		u.WebSearchRequests, _ = a.u.get(tokWebSearches)
	}
	if _, reported := a.u.get(tokWebSearches); a.fam == famAnthropic && (!a.final || !reported) {
		// An Anthropic stream counts its searches in its last message_delta alone: one
		// cut before it is charged the searches its web_search_tool_result blocks showed
		// (searchResults), never fewer.
		u.WebSearchRequests = max(u.WebSearchRequests, a.searchResults())
	}
	if a.fam == famResponses {
		u.WebSearchRequests = a.webSearches()
	}
	// OpenAI's file search tool's calls, billed apiece: file_search_call output items.
	u.FileSearchCalls = int64(a.fileSearches)
	// Its image generation tool's calls, billed per image: image_generation_call items.
	u.ImageGenerationCalls = int64(a.imageCalls)
	// And that tool's input (tool_usage.image_gen), billed at its image model's input
	// prices: its cached part never more than it, else the uncached rest, which
	// settlement charges at the dearer price, would be negative.
	u.ImageToolInputTokens = a.imageToolIn
	u.ImageToolCachedInputTokens = min(a.imageToolCached, a.imageToolIn)
	// An Anthropic stream's advisor consultations, estimated when its counts are lost.
	u.AdvisorResults = int64(a.advisorResults)
	// The containers its code tools ran in, billed by the time each lives.
	if len(a.containers) > 0 {
		u.ContainerIDs = slices.Clone(a.containers)
	}
	if a.mapsGrounded {
		// Gemini's grounding with Google Maps, billed per grounded prompt.
		u.MapsGroundedPrompts = 1
	}
	if a.fam == famChat || a.fam == famResponses || a.fam == famTranscription || a.fam == famGemini {
		// The audio parts of the counts, where the shape reports them.
		u.AudioInputTokens, u.AudioInputReported = a.u.get(tokAudioIn)
		u.AudioOutputTokens, u.AudioOutputReported = a.u.get(tokAudioOut)
	}
	if a.fam == famChat && a.shape == shapeSSE && a.cachedAudio > 0 {
		// A streamed answer in audio: its duration, 48 bytes of PCM16 at 24 kHz (64
		// base64 characters) a millisecond, rounded up, from which an answer cut before
		// its usage is estimated (as an answer in audio is: FormatAudio).
		u.AudioOutputMillis = a.cachedAudio/64 + min(a.cachedAudio%64, 1)
	}
	if a.fam == famGemini && a.hasCachedAudio {
		// The audio part of the cached count (cacheTokensDetails), never more than it: a
		// larger one would be taken off the uncached audio that settlement charges.
		u.CachedAudioInputTokens, u.CachedAudioInputReported = min(a.cachedAudio, cached), true
	}
	if a.fam == famAnthropic {
		// The iterations billed apart (noteIterations) add to every count.
		plus := func(x int64, t int) int64 {
			v, _ := a.u.get(t)
			return saturate.Add(x, v)
		}
		out, cached = plus(out, tokIterOutput), plus(cached, tokIterCacheRead)
		if hasIn {
			in = plus(in, tokIterInput)
		}
		// The advisor's sub-inferences, billed at its model's prices: apart. Its input
		// includes its cache reads and writes, as InputTokens does.
		advCached, _ := a.u.get(tokAdvisorCacheRead)
		advWritten, _ := a.u.get(tokAdvisorCacheWrite)
		u.AdvisorOutputTokens, _ = a.u.get(tokAdvisorOutput)
		u.AdvisorInputTokens = plus(saturate.Add(advCached, advWritten), tokAdvisorInput)
		u.AdvisorCachedInputTokens, u.AdvisorCacheCreationInputTokens = advCached, advWritten
		// The part of its writes made for an hour, never more than its writes.
		advHour, _ := a.u.get(tokAdvisorCacheWrite1h)
		u.AdvisorCacheCreation1hInputTokens = min(advHour, advWritten)
	}
	u.OutputTokens = out
	u.CachedInputTokens = cached
	if a.fam == famAnthropic || a.fam == famConverse {
		// Anthropic's input_tokens leaves out cache reads and writes (Converse's
		// inputTokens too).
		created, _ := a.u.get(tokCacheCreation)
		if a.fam == famAnthropic {
			v, _ := a.u.get(tokIterCacheWrite)
			created = saturate.Add(created, v)
		}
		u.CacheCreationInputTokens = created
		// The part written for an hour (cache_creation.ephemeral_1h_input_tokens), never
		// more than the writes.
		created1h, _ := a.u.get(tokCacheWritePart)
		if a.fam == famAnthropic {
			// And those of the iterations billed apart (a compaction's).
			v, _ := a.u.get(tokIterCacheWrite1h)
			created1h = saturate.Add(created1h, v)
		}
		u.CacheCreation1hInputTokens = min(created1h, created)
		if hasIn {
			if in > math.MaxInt64-cached || in+cached > math.MaxInt64-created {
				in, hasIn = 0, false
			} else {
				in += cached + created
			}
		}
	}
	if (a.fam == famChat || a.fam == famResponses) && hasIn {
		// OpenAI's cache writes (cache_write_tokens, GPT-5.6 on) are a part of its input
		// already, as cached_tokens is: never more than the input left uncached.
		written, _ := a.u.get(tokCacheWritePart)
		u.CacheCreationInputTokens = max(0, min(written, in-min(cached, in)))
	}
	u.InputTokens = in
	u.InputReported, u.OutputReported = hasIn, hasOut
	u.Complete = a.final && hasIn && hasOut
}
