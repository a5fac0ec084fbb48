package e2e_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Some of the tools a model is given are billed apart from the tokens (a web search, a
// container, an image), and the enforcer must count their uses or say why it does not.
// The tools are read from the official SDKs' own declarations: the types of OpenAI's
// Responses API tool union (Tool), the server tools Anthropic's answers name
// (ServerToolUseBlock's name, its beta's too), the members of Google's Tool, and the
// tools of Mistral's Conversations requests. Each
// must be decided in sdkToolDecisions: an SDK update that brings a tool fails here until
// someone decides whether it bills apart and how the enforcer charges it.
func TestEverySDKToolIsDecided(t *testing.T) {
	modules := filepath.Join(sdkDir(t), "node_modules")
	read := func(file string) string {
		b, err := os.ReadFile(filepath.Join(modules, file))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	found := map[string]bool{}
	// OpenAI: export type Tool = FunctionTool | FileSearchTool | Tool.Mcp | ...; each
	// member's "type" names the tool (one or more literals).
	src := read("openai/resources/responses/responses.d.ts")
	types := tsTypes(src)
	union := regexp.MustCompile(`(?m)^export type Tool = (.+);$`).FindStringSubmatch(src)
	if union == nil {
		t.Fatal("no Tool union in OpenAI's responses.d.ts")
	}
	for _, member := range strings.Split(union[1], "|") {
		name := tsResolve(types, "", strings.TrimSpace(member))
		literals := tsLiterals(types[name]["type"])
		if name == "" || len(literals) == 0 {
			t.Errorf("OpenAI's tool %s: no type literal", strings.TrimSpace(member))
		}
		for _, l := range literals {
			found["openai "+l] = true
		}
	}
	// Anthropic: the server tools an answer's server_tool_use blocks name.
	for file, typ := range map[string]string{"@anthropic-ai/sdk/resources/messages/messages.d.ts": "ServerToolUseBlock",
		"@anthropic-ai/sdk/resources/beta/messages/messages.d.ts": "BetaServerToolUseBlock"} {
		for _, l := range tsLiterals(tsTypes(read(file))[typ]["name"]) {
			found["anthropic "+l] = true
		}
	}
	// Google: the members of a Tool.
	for member := range tsTypes(read("@google/genai/dist/genai.d.ts"))["Tool"] {
		found["genai "+member] = true
	}
	// Mistral: the tools a Conversations request takes, each type in a file of its own
	// (its name lower-cased), its "type" a literal.
	const components = "@mistralai/mistralai/esm/models/components/"
	tools := regexp.MustCompile(`tools\?: Array<([^>]+)>`).FindStringSubmatch(read(components + "conversationrequest.d.ts"))
	if tools == nil {
		t.Fatal("no tools in Mistral's ConversationRequest")
	}
	for _, member := range strings.Split(tools[1], "|") {
		name := strings.TrimSpace(member)
		literals := tsLiterals(tsTypes(read(components + strings.ToLower(name) + ".d.ts"))[name]["type"])
		if len(literals) == 0 {
			t.Errorf("Mistral's tool %s: no type literal", name)
		}
		for _, l := range literals {
			found["mistral "+l] = true
		}
	}
	checkDecided(t, found, sdkToolDecisions, 30, "sdkToolDecisions", "is it billed apart from the tokens, and is it charged?")
}

// tsLiteral matches a string literal of a TypeScript type, in either quotes.
var tsLiteral = regexp.MustCompile(`'([^']*)'|"([^"]*)"`)

// tsLiterals are the string literals of a type ("'web_search' | 'web_search_2025_08_26'").
func tsLiterals(typ string) []string {
	var out []string
	for _, m := range tsLiteral.FindAllStringSubmatch(typ, -1) {
		out = append(out, m[1]+m[2])
	}
	return out
}

// Decisions of sdkToolDecisions.
const (
	// toolTokens: the tool's calls are the model's output and their results its input:
	// the usage counts them, nothing is billed apart.
	toolTokens = "tokens only"
	// toolCounted: billed apart, and the enforcer counts its uses and charges them
	// (docs/prices.md names the section).
	toolCounted = "counted"
)

// sdkToolDecisions decides each tool ("sdk tool"): tokens only, counted, or the gap it
// leaves (docs/prices.md, "Billed items not charged yet").
var sdkToolDecisions = map[string]string{
	// OpenAI's Responses API.
	"openai function":                      toolTokens,
	"openai custom":                        toolTokens,
	"openai namespace":                     toolTokens,
	"openai apply_patch":                   toolTokens,
	"openai computer":                      toolTokens,
	"openai computer_use_preview":          toolTokens,
	"openai tool_search":                   toolTokens,
	"openai mcp":                           toolTokens,
	"openai local_shell":                   toolTokens,  // runs on the client's machine
	"openai web_search":                    toolCounted, // "Web searches": its web_search_call items
	"openai web_search_2025_08_26":         toolCounted,
	"openai web_search_preview":            toolCounted,
	"openai web_search_preview_2025_03_11": toolCounted,
	"openai file_search":                   toolCounted, // "File searches": its file_search_call items
	"openai image_generation":              toolCounted, // "OpenAI's image generation tool": its image_generation_call items
	// Containers, billed by the minutes they live, which outlive the request ("Containers":
	// the container its items name).
	"openai code_interpreter":          toolCounted,
	"openai shell":                     toolCounted, // a hosted container (environment container_auto); a local one is the client's
	"openai programmatic_tool_calling": "a V8 runtime without a container, and no price found: tokens only (the code interpreter and shell calls it makes are charged as theirs)",
	// Anthropic's server tools.
	"anthropic web_search":                 toolCounted, // "Web searches": usage.server_tool_use.web_search_requests
	"anthropic advisor":                    toolCounted, // "Anthropic's advisor tool": usage.iterations
	"anthropic web_fetch":                  toolTokens,  // no fee: the pages fetched are input tokens
	"anthropic tool_search_tool_regex":     toolTokens,
	"anthropic tool_search_tool_bm25":      toolTokens,
	"anthropic code_execution":             toolCounted, // "Containers": the message's container (its account's free hours unseen)
	"anthropic bash_code_execution":        toolCounted, // the code execution tool's own uses, in its container
	"anthropic text_editor_code_execution": toolCounted,
	// Google's tools (the Gemini API and Vertex AI).
	"genai functionDeclarations":  toolTokens,
	"genai codeExecution":         toolTokens,
	"genai urlContext":            toolTokens, // its tool results: toolUsePromptTokenCount
	"genai computerUse":           toolTokens,
	"genai mcpServers":            toolTokens,
	"genai fileSearch":            toolTokens,  // retrieval at the tokens; its indexing is deferred billing (file_indexing)
	"genai googleSearch":          toolCounted, // "Web searches": the grounding's search queries
	"genai googleSearchRetrieval": toolCounted, // Gemini 1.5's dynamic retrieval: per grounded prompt
	"genai googleMaps":            toolCounted, // "Grounding with Google Maps"
	"genai enterpriseWebSearch":   "Vertex AI's Web Grounding for enterprise, billed per grounded prompt at its own price: charged as Google Search's grounding (its queries), perhaps below that price (unverified)",
	"genai retrieval":             "Vertex AI Search or RAG Engine, billed by those services: not charged",
	"genai exaAiSearch":           "Vertex AI's grounding with Exa, billed apart: not charged",
	// Mistral's Conversations API: its connectors are billed apiece ("Billed items not
	// charged yet": one secondary source prices them); their tokens are charged.
	"mistral function":           toolTokens,
	"mistral connector":          "a custom connector (MCP): tokens only, as far as any source says",
	"mistral web_search":         "billed apiece (30 USD per 1,000 by one secondary source): not charged",
	"mistral web_search_premium": "billed apiece (news sources): not charged",
	"mistral code_interpreter":   "billed apiece (30 USD per 1,000 by one secondary source): not charged",
	"mistral image_generation":   "billed apiece (100 USD per 1,000 images by one secondary source): not charged",
	"mistral document_library":   "billed apiece, and its documents' indexing (file_indexing): not charged",
	"genai parallelAiSearch":     "Vertex AI's grounding with Parallel, billed apart: not charged",
}
