// Package openapi owns the REST API's OpenAPI 3.1.0 document. It is written by hand as
// YAML fragments, one per resource group (fragments/*.yaml), merged here into one
// document: each fragment contributes `paths` and `components` entries, and a name
// defined twice is an error, so groups cannot silently overwrite each other. It also
// renders the self-contained human page served at /docs.
package openapi

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

//go:embed base.yaml fragments/*.yaml docs.html.tmpl
var files embed.FS

var (
	once    sync.Once
	doc     []byte
	docErr  error
	docPage []byte
)

// Document returns the merged document as JSON.
func Document() ([]byte, error) {
	once.Do(build)
	return doc, docErr
}

// MustDocument is Document for callers that cannot go on without it (tests, startup).
func MustDocument() []byte {
	d, err := Document()
	if err != nil {
		panic(err)
	}
	return d
}

// Page returns the human-readable HTML page of the API.
func Page() ([]byte, error) {
	once.Do(build)
	return docPage, docErr
}

func build() {
	merged, err := merge()
	if err != nil {
		docErr = err
		return
	}
	doc, docErr = json.MarshalIndent(merged, "", "  ")
	if docErr != nil {
		return
	}
	docPage, docErr = render(merged)
}

func readYAML(name string) (map[string]any, error) {
	b, err := files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

func merge() (map[string]any, error) {
	base, err := readYAML("base.yaml")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(files, "fragments/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	for _, name := range names {
		frag, err := readYAML(name)
		if err != nil {
			return nil, err
		}
		for key := range frag {
			if key != "paths" && key != "components" {
				return nil, fmt.Errorf("%s: only paths and components may appear in a fragment, found %q", name, key)
			}
		}
		if err := mergeInto(base, "paths", frag["paths"], name); err != nil {
			return nil, err
		}
		comps, _ := frag["components"].(map[string]any)
		for section, entries := range comps {
			baseComps := base["components"].(map[string]any)
			if _, ok := baseComps[section]; !ok {
				baseComps[section] = map[string]any{}
			}
			if err := mergeInto(baseComps, section, entries, name); err != nil {
				return nil, err
			}
		}
	}
	return base, nil
}

// mergeInto adds the entries of src to dst[key]. A path may be split across fragments by
// method, but a method or component defined twice is an error.
func mergeInto(dst map[string]any, key string, src any, from string) error {
	if src == nil {
		return nil
	}
	in, ok := src.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: %s must be a mapping", from, key)
	}
	out, _ := dst[key].(map[string]any)
	if out == nil {
		out = map[string]any{}
		dst[key] = out
	}
	for name, v := range in {
		existing, dup := out[name]
		if !dup {
			out[name] = v
			continue
		}
		em, ok1 := existing.(map[string]any)
		vm, ok2 := v.(map[string]any)
		if key != "paths" || !ok1 || !ok2 {
			return fmt.Errorf("%s: %s %q is defined twice", from, key, name)
		}
		for method, op := range vm {
			if _, dup := em[method]; dup {
				return fmt.Errorf("%s: %s %s is defined twice", from, strings.ToUpper(method), name)
			}
			em[method] = op
		}
	}
	return nil
}

// Operation is one documented route.
type Operation struct {
	Method, Path, Summary, Description, Tag string
}

// Operations lists every documented route, sorted by path then method.
func Operations() ([]Operation, error) {
	merged, err := merge()
	if err != nil {
		return nil, err
	}
	return operations(merged), nil
}

func operations(merged map[string]any) []Operation {
	var ops []Operation
	paths, _ := merged["paths"].(map[string]any)
	for path, item := range paths {
		methods, _ := item.(map[string]any)
		for method, raw := range methods {
			op, ok := raw.(map[string]any)
			if !ok || !isMethod(method) {
				continue
			}
			o := Operation{Method: strings.ToUpper(method), Path: path}
			o.Summary, _ = op["summary"].(string)
			o.Description, _ = op["description"].(string)
			if tags, ok := op["tags"].([]any); ok && len(tags) > 0 {
				o.Tag, _ = tags[0].(string)
			}
			ops = append(ops, o)
		}
	}
	sort.Slice(ops, func(i, j int) bool {
		if ops[i].Tag != ops[j].Tag {
			return ops[i].Tag < ops[j].Tag
		}
		if ops[i].Path != ops[j].Path {
			return ops[i].Path < ops[j].Path
		}
		return ops[i].Method < ops[j].Method
	})
	return ops
}

func isMethod(m string) bool {
	switch m {
	case "get", "post", "put", "patch", "delete":
		return true
	}
	return false
}

func render(merged map[string]any) ([]byte, error) {
	tmpl, err := template.ParseFS(files, "docs.html.tmpl")
	if err != nil {
		return nil, err
	}
	info, _ := merged["info"].(map[string]any)
	var buf bytes.Buffer
	err = tmpl.Execute(&buf, map[string]any{"Info": info, "Operations": operations(merged), "Document": string(doc)})
	return buf.Bytes(), err
}
