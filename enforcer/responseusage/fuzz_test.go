package responseusage

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fuzzLimits keeps the model limit small so that the fuzzer reaches it; the
// depth limit stays the default because the reference (encoding/json) has
// the same one.
var fuzzLimits = Limits{MaxModelBytes: 24}

// checkInvariants feeds body whole, in random pieces and (when short) byte by
// byte, and compares the results; it returns the whole-body result. It stays
// cheap so that the fuzzer runs many inputs: TestFixtures cuts the fixtures
// at every byte.
func checkInvariants(t *testing.T, ct string, body []byte, seed uint64) Usage {
	t.Helper()
	whole := run(ct, nil, fuzzLimits, [][]byte{body}, true)
	r := rand.New(rand.NewPCG(seed, ^seed))
	if got := run(ct, nil, fuzzLimits, randomSplit(body, r), true); !reflect.DeepEqual(got, whole) {
		t.Fatalf("random split:\n got %s\nwhole %s", show(got), show(whole))
	}
	if len(body) <= 512 {
		if got := run(ct, nil, fuzzLimits, bytewise(body), true); !reflect.DeepEqual(got, whole) {
			t.Fatalf("byte by byte:\n got %s\nwhole %s", show(got), show(whole))
		}
	}
	// Broken off, a stream is complete only when it ended by its protocol: a "[DONE]" or
	// its terminal event after its final report, a top-level array closed (a JSON object,
	// complete, holds no such end; AWS's event stream is read as its frames,
	// eventStreamEnded).
	broken := run(ct, nil, fuzzLimits, [][]byte{body}, false)
	want := whole
	ended := endedAt(ct, body)
	if ct == ctEventStream {
		ended = eventStreamEnded(body)
	}
	want.Complete = whole.Complete && ended
	if !reflect.DeepEqual(broken, want) {
		t.Fatalf("broken off:\n got %s\nwant %s", show(broken), show(want))
	}
	return whole
}

// addFixtureSeeds seeds the corpus with the fixtures of one kind that are
// small enough for new inputs derived from them to be minimised quickly.
func addFixtureSeeds(f *testing.F, suffix string) {
	seen := map[string]bool{}
	for _, tc := range fixtureCases {
		if !strings.HasSuffix(tc.file, suffix) || seen[tc.file] {
			continue
		}
		seen[tc.file] = true
		if b := readFixture(f, tc.file); len(b) <= 2048 {
			f.Add(b, uint64(len(b)))
		}
	}
}

func FuzzExtractJSON(f *testing.F) {
	addFixtureSeeds(f, ".json")
	for _, s := range []string{
		// Output carried by tool calls and thinking (2026-12-03): Bedrock Converse's,
		// Gemini's, a Responses answer's, Mistral's Conversations answer (and its model).
		`{"output":{"message":{"content":[{"reasoningContent":{"reasoningText":{"text":"t"}}},{"toolUse":{"input":{"a":[1]}}}]}},"usage":{"inputTokens":1,"outputTokens":2}}`,
		`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{"a":"b"}}},{"executableCode":{"code":"x=1"}}]}}],"usageMetadata":{"promptTokenCount":3}}`,
		`{"object":"response","output":[{"type":"custom_tool_call","input":"p"},{"type":"code_interpreter_call","code":"c","input":7}]}`,
		`{"model":"m0","object":"conversation.response","outputs":[{"model":"m1","content":[{"type":"thinking","thinking":[{"text":"t"}]},{"text":"a"}]},{"arguments":"{}","model":null}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
		`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
		`{"type":"message","model":"c","usage":{"input_tokens":1,"cache_read_input_tokens":2,"cache_creation_input_tokens":3,"output_tokens":4}}`,
		`{"object":"response","model":"r","usage":{"input_tokens":5,"input_tokens_details":{"cached_tokens":1},"output_tokens":6}}`,
		`{"\u0075sage":{"prompt_tokens":1e3,"completion_tokens":-0},"model":"\ud800\udc00\ud800x"}`,
		"{\"model\":\"\xff\xfe\",\"usage\":null}",
		`[1,true,false,null,"x",{"a":[]}] `,
		// Gemini's streamGenerateContent without alt=sse: its chunks in an array (applyElement).
		"[{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"h\u00e9\"}]}}],\"usageMetadata\":{\"promptTokenCount\":5,\"cachedContentTokenCount\":4,\"cacheTokensDetails\":[{\"modality\":\"AUDIO\",\"tokenCount\":3}]},\"modelVersion\":\"g\"}\r\n,\r\n" +
			"{\"object\":\"chat.completion.chunk\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}},7,[{\"usageMetadata\":{\"promptTokenCount\":9}}]," +
			"{\"candidates\":[{\"finishReason\":\"STOP\",\"groundingMetadata\":{\"webSearchQueries\":[\"q\"]}}],\"usageMetadata\":{\"promptTokenCount\":5,\"candidatesTokenCount\":2,\"thoughtsTokenCount\":7}}\r\n]",
		`{"usage":{"prompt_tokens":5,"completion_tokens":2},"usage":{"prompt_tokens":3,"completion_tokens":4,"prompt_tokens":1}}`,
		`{"choices":[{"message":{"content":"h\u00e9\ud83d\ude00\n","reasoning_content":"r","tool_calls":[{"function":{"arguments":"{\"a\":1}"}}]},"text":"t"}]}`,
		"{\"choices\":[{\"delta\":{\"content\":\"a\xff\xe2\x82\xed\xa0\x80\\u00e9\"}}]}",
		`{"type":"message","content":[{"type":"text","text":"x"},{"type":"thinking","thinking":"y"},{"type":"tool_use","input":{"a":[1,{"b":"c"}]}}]}`,
		`{"object":"response","output":[{"content":[{"text":"a","refusal":"b"}],"arguments":"{}","summary":[{"text":"s"}]}]}`,
		`{"delta":"abc","type":"response.output_text.delta"}`,
		`{"object":"response","output":[{"type":"file_search_call"},{"type":"web_search_call"},{"type":"file_\u0073earch_call"}],"response":{"output":[{"type":"file_search_call"}]}}`,
		`{"object":"response","output":[{"type":"image_generation_call"},{"type":"image_gener\u0061tion_call"}],"response":{"output":[{"type":"image_generation_call","status":"failed"}]}}`,
		`{"candidates":[{"content":{"parts":[{"text":"hé"},{"text":"y"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":2,"thoughtsTokenCount":30,"cachedContentTokenCount":4,"totalTokenCount":40},"modelVersion":"gemini-2.5-flash"}`,
		`{"usageMetadata":{"promptTokenCount":8},"usage":{"prompt_tokens":1},"modelVersion":"a","model":"b","candidates":[{"finishReason":1}]}`,
		`{"type":"message","usage":{"input_tokens":1,"cache_creation_input_tokens":9,"cache_creation":{"ephemeral_1h_input_tokens":4,"ephemeral_1h_input_tokens":7}},"message":{"usage":{"cache_creation":{"ephemeral_1h_input_tokens":2}}}}`,
		`{"object":"chat.completion","service_tier":"priority","service_tier":"pri\u006frity","usage":{"prompt_tokens":1,"completion_tokens":2},"response":{"service_tier":"priority"}}`,
		`{"object":"chat.completion","usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_cache_hit_tokens":12,"prompt_cache_hit_tokens":"3","prompt_cache_miss_tokens":1},"response":{"usage":{"prompt_cache_hit_tokens":4}}}`,
		`{"text":"Hello there.","usage":{"type":"duration","seconds":9.0001}}`,
		`{"task":"transcribe","duration":9.21,"segments":[{"text":" a","seconds":1}],"usage":{"type":"duration","seconds":0.0004,"seconds":9223372036854775.807},"usage":{"seconds":-1.5e3}}`,
		`{"usage":{"seconds":0.00000,"seconds":9e1,"seconds":92233720368547758.07,"seconds":"9"},"message":{"usage":{"seconds":1.5}}}`,
		`{"text":"x","usage":{"type":"tokens","seconds":9,"input_tokens":14,"input_token_details":{"text_tokens":0,"audio_tokens":14},"output_tokens":45,"total_tokens":59}}`,
		`{"object":"chat.completion","usage":{"prompt_tokens":119,"completion_tokens":9,"total_tokens":226,"total_tokens":-1,"total_tokens":"9"},"message":{"usage":{"total_tokens":9223372036854775807}}}`,
		`{"usage":{"prompt_tokens":1,"cost":{"request_cost":0.008,"total_cost":0.05,"total_cost":1e-3,"total_cost":"2"},"cost":0.01},"message":{"usage":{"cost":{"total_cost":3}}},"cost":{"total_cost":4}}`,
		`{"object":"response","output":[{"type":"code_interpreter_call","container_id":"cntr_1","container_id":7},{"environment":{"container_id":"cntr_\u0032"}}],"container":{"id":"c","id":null},"usage":{"input_tokens":1,"output_tokens":2}}`,
		`{"type":"message_delta","delta":{"container":{"id":"container_1"}},"usage":{"output_tokens":3}}`,
		`{"usage_info":{"pages_processed":12,"pages_processed":9223372036854775807,"pages_processed":1e2,"pages_processed":"3","doc_size_bytes":null},"usage":{"pages_processed":2},"message":{"usage_info":{"pages_processed":4}},"pages_processed":5}`,
		`{"usage":{"prompt_tokens":1,"cost_in_usd_ticks":158500,"cost_in_usd_ticks":9223372036854775807,"cost_in_usd_ticks":1e4,"cost_in_usd_ticks":"9","cost_in_usd_ticks":-1,"cost":0.01},"response":{"usage":{"cost_in_usd_ticks":9223372036854775808}},"cost_in_usd_ticks":7}`,
		`{"candidates":[{"groundingMetadata":{"webSearchQueries":["a","\u0062",1,["c"]],"webSearchQueries":["d"]},"finishReason":"STOP"},{"groundingMetadata":{"webSearchQueries":[]}}],"usageMetadata":{"promptTokenCount":1}}`,
		`{"candidates":[{"groundingMetadata":{"groundingChunks":[{"maps":"x"},{"web":{"maps":{}}},[{"maps":{}}],{"m\u0061ps":{"placeId":"p"}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1}}`,
		`{"usageMetadata":{"promptTokenCount":9,"promptTokensDetails":[{"tokenCount":5,"modality":"AUDIO","modality":"AUDIO"},{"modality":"AUD\u0049O","tokenCount":7,"tokenCount":1.5},{"modality":"AUDIO","tokenCount":-1}],"candidatesTokensDetails":[7,{"modality":"TEXT"}]},"usage":{"prompt_tokens_details":{"audio_tokens":3},"completion_tokens_details":{"audio_tokens":2,"audio_tokens":1}}}`,
		`{"usageMetadata":{"promptTokenCount":9,"cachedContentTokenCount":6,"cacheTokensDetails":[{"tokenCount":7,"modality":"AUDIO"},{"modality":"AUDIO","tokenCount":5},{"modality":"TEXT","tokenCount":1}],"cacheTokensDetails":{"modality":"AUDIO"}},"usage":{"cacheTokensDetails":[{"modality":"AUDIO","tokenCount":3}]},"message":{"usage":{"cacheTokensDetails":[{"modality":"AUDIO","tokenCount":8}]}}}`,
		`{"usage":{"cost":1.5e-7,"cost":0.0000100,"cost":-1,"cost":"2","prompt_tokens":1},"message":{"usage":{"cost":12E1}},"response":{"usage":{"cost":0.000000000000000000000000000000001}}}`,
		`{"object":"response","output":[{"type":"web_search_call","type":"web_\u0073earch_call","action":{"type":"web_search_call"}},{"type":"message"},["x"]],"output":[{"type":"web_search_call"}],"usage":{"input_tokens":1,"output_tokens":2}}`,
		`{"type":"message","usage":{"input_tokens":1,"output_tokens":2,"speed":"fast","speed":"f\u0061st","service_tier":"priority"},"message":{"usage":{"speed":"fast"},"service_tier":"x"},"usage":{"speed":null}}`,
		`{"usage":{"speed":"fast"},"object":"chat.completion","service_tier":"default","usage":{"speed":"fast","prompt_tokens":1}}`,
		`{"usageMetadata":{"trafficType":"ON_DEMAND_PRIORITY","promptTokenCount":1,"trafficType":"ON_DEMAND_PRIORITY_AND_MORE_THAN_THIRTY_TWO_BYTES"},"usage":{"trafficType":"ON_DEMAND_PRIORITY"},"message":{"usage":{"trafficType":"ON_DEMAND_PRIORITY"}}}`,
		`{"type":"message","usage":{"inference_geo":"us","input_tokens":1,"inference_geo":"gl\u006fbal"},"message":{"usage":{"inference_geo":"us"}},"response":{"usage":{"inference_geo":7}}}`,
		`{"type":"message","usage":{"input_tokens":5,"iterations":[{"type":"compaction","input_tokens":7,"output_tokens":1},{"output_tokens":3,"type":"message","input_tokens":2},9,{"type":7,"cache_read_input_tokens":4}]},"response":{"usage":{"input_tokens":3}},"message":{"usage":{"iterations":[{"type":"advisor_message","input_tokens":11,"cache_creation_input_tokens":2}]}},"usage":{"iterations":[{"input_tokens":1}]}}`,
		`{"usage":{"inputTokens":1,"cacheWriteInputTokens":9,"cacheDetails":[{"ttl":"1h","inputTokens":5,"ttl":"1h"},{"ttl":"1h"},7,{"inputTokens":8}],"cacheDetails":[{"ttl":"1h","inputTokens":2}]},"message":{"usage":{"cacheDetails":[{"ttl":"1h","inputTokens":3}]}}}`,
		`{"usageMetadata":{"promptTokenCount":5,"toolUsePromptTokenCount":7,"toolUsePromptTokenCount":2,"cache_creation_input_tokens":9},"message":{"usage":{"toolUsePromptTokenCount":4}}}`,
		`{"usageMetadata":{"serviceTier":"priority","trafficType":"ON_DEMAND"},"usageMetadata":{"serviceTier":"pri\u006frity"},"serviceTier":"priority"}`,
		// Bedrock Converse's latency-optimized inference (performanceConfig.latency).
		`{"usage":{"inputTokens":1,"outputTokens":2},"performanceConfig":{"latency":"optimized","latency":"st\u0061ndard"},"performanceConfig":{"latency":"optimiz\u0065d"},"metrics":{"latency":"optimized"},"message":{"performanceConfig":{"latency":"optimized"}},"performanceConfig":{"latency":{"latency":"optimized"}}}`,
		// OpenAI's image generation tool's usage (tool_usage.image_gen), beside the response's.
		`{"object":"response","usage":{"input_tokens":5,"output_tokens":6,"total_tokens":11},"tool_usage":{"image_gen":{"input_tokens":9,"cached_tokens":12,"input_tokens":"3","output_tokens":7},"image_gen":{"cached_tokens":4},"web_search":{"num_requests":2}},` +
			`"message":{"usage":{"total_tokens":20,"prompt_tokens_details":{"audio_tokens":30}}},"response":{"tool_usage":{"image_gen":{"input_tokens":99}}},"tool_usage":null,"tool_usage":{"image_g\u0061n":{"input_tokens":10}}}`,
		// An embedding's floats, whose digits the scanner passes over in runs
		// (passesDigits), beside counts too long to read and malformed numbers.
		`{"object":"list","data":[{"embedding":[-0.0123456789,0.5,1e-7,-12345678901234567890,3.14E+10,0,-0,12.5e-3]}],"usage":{"prompt_tokens":8,"total_tokens":12345678901234567890123,"prompt_tokens":9.5}}`,
		`{"data":[{"embedding":[1.]}],"usage":{"prompt_tokens":1}}`,
		`{"data":[{"embedding":[-01]}],"usage":{"prompt_tokens":1}}`,
		`{"data":[{"embedding":[1.5e+]}],"usage":{"prompt_tokens":1}}`,
		`{"data":[{"embedding":[-1.25e-12x]}],"usage":{"prompt_tokens":1}}`,
	} {
		f.Add([]byte(s), uint64(7))
	}
	f.Fuzz(func(t *testing.T, body []byte, seed uint64) {
		whole := checkInvariants(t, ctJSON, body, seed)
		if !json.Valid(body) {
			if whole.Complete {
				t.Fatalf("malformed JSON gave a complete usage: %s", show(whole))
			}
			return
		}
		if ref := oracleJSON(body, fuzzLimits); !reflect.DeepEqual(whole, ref) {
			t.Fatalf("differs from encoding/json:\n got %s\n ref %s", show(whole), show(ref))
		}
	})
}

func FuzzExtractSSE(f *testing.F) {
	addFixtureSeeds(f, ".sse")
	for _, s := range []string{
		// Mistral's Conversations stream (2026-12-03): its output's text and its model.
		"data: {\"type\":\"message.output.delta\",\"model\":\"m\",\"content\":{\"type\":\"thinking\",\"thinking\":[{\"text\":\"t\"}]}}\n\n" +
			"data: {\"content\":\"a\",\"type\":\"message.output.delta\"}\n\ndata: {\"type\":\"function.call.delta\",\"arguments\":\"{}\",\"content\":\"x\"}\n\n" +
			"data: {\"type\":\"conversation.response.done\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n",
		"data: {\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":{\"text\":\"r\"},\"toolUse\":{\"input\":\"{\\\"a\\\":1}\"}}}\n\n",
		"data: {\"object\":\"chat.completion.chunk\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n",
		"event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\r\n\r\n" +
			"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\r\r",
		"data: {\"type\":\"response.completed\",\n data: \"response\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n",
		": comment\ndata\ndata:1 2 {}{}\"x\"\n\n",
		"data: {\"object\":\"chat.completion.chunk\",\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":9}}\n\ndata: {\"object\":\"chat.completion.chunk\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"h\\u00e9\xf0\x9f\x98\x80\",\"tool_calls\":[{\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n",
		"data: {\"type\":\"response.output_text.delta\",\"delta\":\"ab\"}\n\ndata: {\"delta\":\"cd\",\"type\":\"response.audio.delta\"}\n\n",
		"data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"x\",\"partial_json\":\"{\",\"thinking\":\"t\"}}\n\n",
		"data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"advisor_tool_result\",\"type\":\"text\",\"content\":{\"type\":\"advisor_result\",\"text\":\"a\"}}}\n\n" +
			"data: {\"content_block\":{\"type\":\"advisor_tool_result\"},\"type\":\"content_block_start\"}\n\ndata: {\"type\":\"content_block_delta\",\"content_block\":{\"type\":\"advisor_tool_result\"}}\n\n",
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}],\"usageMetadata\":{\"promptTokenCount\":5,\"totalTokenCount\":5},\"modelVersion\":\"g\"}\r\n\r\n" +
			"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"b\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":5,\"candidatesTokenCount\":2,\"thoughtsTokenCount\":7}}\r\n\r\n",
		"data: {\"usageMetadata\":{\"promptTokenCount\":5,\"cachedContentTokenCount\":4,\"cacheTokensDetails\":[{\"modality\":\"AUDIO\",\"tokenCount\":3}]}}\n\n" +
			"data: {\"candidates\":[{\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":5,\"cachedContentTokenCount\":4,\"cacheTokensDetails\":[{\"modality\":\"TEXT\",\"tokenCount\":4}]}}\n\n" +
			"data: {\"object\":\"chat.completion.chunk\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"cacheTokensDetails\":[{\"modality\":\"AUDIO\",\"tokenCount\":1}]}}\n\n",
		"data: {\"type\":\"transcript.text.delta\",\"delta\":\"h\\u00e9\"}\ndata: {\"delta\":\"x\",\"type\":\"transcript.text.done\",\"text\":\"h\u00e9\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2,\"seconds\":3.5}}\n",
		"data: {\"text\":\"a\",\"usage\":{\"type\":\"duration\",\"seconds\":9.5}}\n\ndata: {\"type\":\"transcript.text.segment\",\"delta\":\"a\"}\n\n",
		"data: {\"type\":\"speech.audio.delta\",\"audio\":\"SUQz\",\"delta\":\"x\"}\n\ndata: {\"type\":\"speech.audio.done\",\"usage\":{\"input_tokens\":14,\"output_tokens\":101}}\n\n",
		"data: {\"type\":\"image_generation.partial_image\",\"b64_json\":\"iVBO\"}\n\ndata: {\"type\":\"image_edit.completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":4160,\"input_tokens_details\":{\"image_tokens\":4}}}\n\n",
		"data: {\"type\":\"response.web_search_call.completed\",\"item_id\":\"ws_1\"}\n\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"type\":\"web_search_call\"},{\"type\":\"web_search_call\"}],\"usage\":{\"input_tokens\":1,\"output_tokens\":2}},\"response\":{\"output\":[{\"type\":\"web_search_call\"}]}}\n\n",
		"data: {\"type\":\"response.in_progress\",\"response\":{\"tool_usage\":{\"image_gen\":{\"input_tokens\":50,\"cached_tokens\":60}}}}\n\n" +
			"data: {\"type\":\"response.completed\",\"tool_usage\":{\"image_gen\":{\"input_tokens\":70}},\"response\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":2},\"tool_usage\":{\"image_gen\":{\"input_tokens\":40,\"cached_tokens\":\"9\"}}}}\n\n" +
			"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}},\"response\":{\"tool_usage\":{\"image_gen\":{\"input_tokens\":8}}}}\n\n",
		// Terminal events after the final report (endsStream), one of another family after it.
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":3,\"output_tokens\":9}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n" +
			"data: {\"type\":\"response.failed\",\"response\":{\"usage\":{\"input_tokens\":1}}}\n\n",
		"data: {\"event_type\":\"interaction.completed\",\"interaction\":{\"usage\":{\"total_input_tokens\":1,\"total_output_tokens\":2}}}\r\n\r\n",
		"data: {\"metadata\":{},\"usage\":{\"inputTokens\":1,\"outputTokens\":2}}\n\ndata: {\"type\":\"message_stop\"}{\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}\n\n",
		// Anthropic's web search results, counted while its usage has not said (2026-12-07),
		// an error's left out.
		"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1,\"server_tool_use\":{\"web_search_requests\":0}}}}\n\n" +
			"data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"web_search_tool_result\",\"content\":[{\"type\":\"web_search_result\"}]}}\n\n" +
			"data: {\"type\":\"content_block_start\",\"content_block\":{\"content\":{\"type\":\"web_search_tool_result_error\"},\"type\":\"web_search_tool_result\"}}\n\n" +
			"data: {\"content_block\":{\"type\":\"web_search_tool_result\"},\"type\":\"content_block_start\"}\n\n",
		// Groq's x_groq.usage; a chat answer's audio (and Gemini's cached audio in one chunk).
		"data: {\"object\":\"chat.completion.chunk\",\"x_groq\":{\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":1}}}}\n\ndata: [DONE]\n\n",
		"data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"audio\":{\"data\":\"AAAA\\/A==\",\"transcript\":\"a\"}}}]}\n\n" +
			"data: {\"choices\":[{\"delta\":{\"audio\":{\"data\":\"AAAA\"}}}],\"usageMetadata\":{\"cacheTokensDetails\":[{\"modality\":\"AUDIO\",\"tokenCount\":3}]}}\n\n",
	} {
		f.Add([]byte(s), uint64(11))
	}
	f.Fuzz(func(t *testing.T, body []byte, seed uint64) {
		whole := checkInvariants(t, ctSSE, body, seed)
		if ref := oracleSSE(body, fuzzLimits); !reflect.DeepEqual(whole, ref) {
			t.Fatalf("differs from the reference reader:\n got %s\n ref %s", show(whole), show(ref))
		}
		// Without a content type the body is sniffed; that too must not
		// depend on how it is cut.
		checkInvariants(t, "", body, seed+1)
	})
}

// FuzzExtractEncoded compresses a body with each supported coding (flushed
// at random points, as a server streaming events does) and cuts the result
// at random: the usage must be that of the plain body.
func FuzzExtractEncoded(f *testing.F) {
	for _, suffix := range []string{".json", ".sse"} {
		seen := map[string]bool{}
		for _, tc := range fixtureCases {
			if strings.HasSuffix(tc.file, suffix) && !seen[tc.file] {
				seen[tc.file] = true
				if b := readFixture(f, tc.file); len(b) <= 4096 {
					f.Add(b, uint64(len(b)), uint8(len(seen)))
				}
			}
		}
	}
	f.Add([]byte(`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`), uint64(1), uint8(0))
	f.Add([]byte(`{"text":"Hello there.","usage":{"type":"duration","seconds":9.0001}}`), uint64(2), uint8(2))
	f.Add([]byte("data: {\"type\":\"transcript.text.delta\",\"delta\":\"Hel\"}\n\ndata: {\"type\":\"transcript.text.done\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}\n\n"), uint64(3), uint8(3))
	f.Fuzz(func(t *testing.T, body []byte, seed uint64, which uint8) {
		ct := ctJSON
		if which&1 == 1 {
			ct = ctSSE
		}
		enc := encodings[int(which>>1)%len(encodings)]
		r := rand.New(rand.NewPCG(seed, ^seed))
		z := enc.apply(body, r)
		plain := run(ct, nil, fuzzLimits, [][]byte{body}, true)
		if got := run(ct, enc.headers(), fuzzLimits, randomSplit(z, r), true); !reflect.DeepEqual(got, plain) {
			t.Fatalf("%s in random pieces:\n got %s\nplain %s", enc, show(got), show(plain))
		}
		if len(z) <= 512 {
			if got := run(ct, enc.headers(), fuzzLimits, bytewise(z), true); !reflect.DeepEqual(got, plain) {
				t.Fatalf("%s byte by byte:\n got %s\nplain %s", enc, show(got), show(plain))
			}
		}
		// Broken off after its last byte, it is complete when it ended by its protocol,
		// as a plain body is (its coding's end came too).
		broken := run(ct, enc.headers(), fuzzLimits, [][]byte{z}, false)
		plain.Complete = plain.Complete && endedAt(ct, body)
		if !reflect.DeepEqual(broken, plain) {
			t.Fatalf("%s broken off:\n got %s\nplain %s", enc, show(broken), show(plain))
		}
	})
}

// FuzzDecodeCorrupt feeds anything as a compressed body: decoding never
// panics or blocks, and Finish returns. With gzip and deflate the result
// does not depend on how the body was cut. With brotli it may: its reader
// hands out what it decoded whenever its input runs out, so what a corrupt
// stream yields before its error depends on where the chunks end, and it
// reads ahead, so the count of undecoded bytes does too.
func FuzzDecodeCorrupt(f *testing.F) {
	body := readFixture(f, "anthropic_stream.sse")
	for i, enc := range encodings {
		z := enc.apply(body, rand.New(rand.NewPCG(1, 2)))
		f.Add(z, uint64(i), uint8(i))
		f.Add(z[:len(z)/2], uint64(i), uint8(i))
	}
	f.Add([]byte("not compressed"), uint64(0), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64, which uint8) {
		enc := encodings[int(which)%len(encodings)]
		r := rand.New(rand.NewPCG(seed, ^seed))
		whole := run(ctSSE, enc.headers(), fuzzLimits, [][]byte{data}, true)
		split := run(ctSSE, enc.headers(), fuzzLimits, randomSplit(data, r), true)
		if whole.TextBytesFromRaw && whole.TextBytes <= 0 {
			t.Fatalf("undecoded bytes flagged without any: %s", show(whole))
		}
		if slices.Contains(enc.codings, "br") {
			return
		}
		if whole.TextBytesFromRaw || split.TextBytesFromRaw {
			whole.TextBytes, split.TextBytes = 0, 0
			whole.TextBytesFromRaw, split.TextBytesFromRaw = false, false
		}
		if !reflect.DeepEqual(whole, split) {
			t.Fatalf("%s:\nwhole %s\nsplit %s", enc, show(whole), show(split))
		}
	})
}
