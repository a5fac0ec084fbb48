package requestbody

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
)

// Container is what a request's code tools say of the container they run in, which
// its provider bills by the time it lives (pricecatalog.Container).
type Container struct {
	// Kind is the container price its settlement charges (a pricecatalog.Container
	// kind): "openai-<memory>" for OpenAI's code interpreter or hosted shell in a
	// container the request opens or reuses ({"type": "auto"}, "container_auto", or no
	// container or environment said), of its memory_limit (1g when unsaid; the dearest of
	// several tools'): charged only for a container the answer names, so a shell run on
	// the client's machine costs nothing here. "anthropic" for
	// Anthropic's code execution tool. "" when nothing is charged: no such tool, or
	// Anthropic's beside its web search or web fetch tool of version 20260209 or later,
	// with which code execution is free.
	Kind string
	// Explicit: an OpenAI tool names its container by id (a code interpreter's
	// "container": "cntr_...", a shell's "container_reference"), created apart by
	// POST /v1/containers, deferred billing (DeferredContainers): its minutes are that
	// container's, billed out of the request's sight (DeferredRequest).
	Explicit bool
}

// openAIMemory are the memory limits of OpenAI's containers, cheapest first; a value
// it does not know is read as the dearest (the provider refuses it anyway).
var openAIMemory = []string{"1g", "4g", "16g", "64g"}

// anthropicFreeFrom is the first version of Anthropic's web search and web fetch tools
// beside which its code execution is free (its changelog of 2026-02-17).
const anthropicFreeFrom = "20260209"

// environment is an OpenAI shell tool's environment.
type environment struct {
	Type        string `json:"type"`
	MemoryLimit string `json:"memory_limit"`
}

// memoryLimit is the environment's memory limit, "" for none said.
func (e *environment) memoryLimit() string {
	if e == nil {
		return ""
	}
	return e.MemoryLimit
}

// ContainerTool reads the request's container tools (estimate.Request.Container says
// there is one). A body that does not read gives the zero Container.
func ContainerTool(body []byte) Container {
	var req struct {
		Tools []struct {
			Type        string          `json:"type"`
			Container   json.RawMessage `json:"container"`
			Environment *environment    `json:"environment"`
		} `json:"tools"`
	}
	if UnmarshalExact(body, &req, "tools") != nil {
		return Container{}
	}
	var c Container
	memory, anthropic, free := -1, false, false
	opens := func(limit string) {
		m := slices.Index(openAIMemory, limit)
		if limit == "" {
			m = 0
		} else if m < 0 {
			m = len(openAIMemory) - 1
		}
		memory = max(memory, m)
	}
	for _, t := range req.Tools {
		switch {
		case strings.HasPrefix(t.Type, "code_interpreter"):
			var auto struct {
				MemoryLimit string `json:"memory_limit"`
			}
			var id string
			switch {
			case json.Unmarshal(t.Container, &id) == nil && id != "":
				c.Explicit = true
			case json.Unmarshal(t.Container, &auto) == nil:
				opens(auto.MemoryLimit)
			default:
				opens("") // no container said: one it opens, charged only if the answer names it
			}
		case t.Type == "shell":
			switch {
			case t.Environment == nil || t.Environment.Type == "container_auto":
				// A hosted container, or no environment said: charged only if the answer
				// names a container (a local shell's calls name none).
				opens(t.Environment.memoryLimit())
			case t.Environment.Type == "container_reference":
				c.Explicit = true
			}
		case strings.HasPrefix(t.Type, "code_execution_"):
			anthropic = true
		case strings.HasPrefix(t.Type, "web_search_"), strings.HasPrefix(t.Type, "web_fetch_"):
			_, version, _ := strings.Cut(t.Type[len("web_"):], "_")
			free = free || len(version) == len(anthropicFreeFrom) && version >= anthropicFreeFrom
		}
	}
	switch {
	case memory >= 0:
		c.Kind = "openai-" + openAIMemory[memory]
	case anthropic && !free:
		c.Kind = "anthropic"
	}
	return c
}

// DeferredRequest is Deferred for a request whose body the front door read (est nil
// when the estimate could not; Unread when it read nothing: InBackground): a Responses
// call in the background, or one whose code tool names a container created apart
// (Container.Explicit: DeferredContainers), is deferred billing too, and so is an
// Interactions API call run by an agent (NamesAgent).
func DeferredRequest(method, path string, est *estimate.Request, body []byte) string {
	if kind := Deferred(method, path, InBackground(est, body)); kind != "" || !generates(method) {
		return kind
	}
	if strings.HasSuffix(comparable(path), "/interactions") && NamesAgent(body) {
		return DeferredInteractions
	}
	explicit := est != nil && est.ExplicitContainer
	if (est == nil || est.Unread) && AlwaysJSON(path) {
		explicit = ContainerTool(body).Explicit // a body the estimate refused, read as the provider would
	}
	if explicit {
		return DeferredContainers
	}
	return ""
}
