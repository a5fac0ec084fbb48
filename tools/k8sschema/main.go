// Command k8sschema writes the offline JSON schemas that the chart tests give
// kubeconform: one standalone, strict schema per Kubernetes kind the chart
// renders, built from the Go API types of k8s.io/api through openapi-gen (the
// generator Kubernetes itself uses for its OpenAPI document), and one schema
// per custom resource from its CustomResourceDefinition.
//
// Run it through gen.sh, which first generates internal/openapi.
//
// Strict means what kubeconform's "-strict" schemas mean: every object that
// lists its properties refuses any other property, so a misspelt or misplaced
// field fails validation instead of being dropped by the API server.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tollgate-dev/tollgate/tools/k8sschema/internal/openapi"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/yaml"
)

// kind is one built-in kind the chart renders.
type kind struct {
	group, version, kind string
	model                string // OpenAPI model name
}

// kinds: only what charts/tollgate renders. Add a kind here when a template
// starts rendering it, then run gen.sh.
var kinds = []kind{
	{"", "v1", "ConfigMap", "io.k8s.api.core.v1.ConfigMap"},
	{"", "v1", "Service", "io.k8s.api.core.v1.Service"},
	{"", "v1", "ServiceAccount", "io.k8s.api.core.v1.ServiceAccount"},
	{"apps", "v1", "Deployment", "io.k8s.api.apps.v1.Deployment"},
	{"batch", "v1", "Job", "io.k8s.api.batch.v1.Job"},
	{"policy", "v1", "PodDisruptionBudget", "io.k8s.api.policy.v1.PodDisruptionBudget"},
	{"autoscaling", "v2", "HorizontalPodAutoscaler", "io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler"},
	{"networking.k8s.io", "v1", "Ingress", "io.k8s.api.networking.v1.Ingress"},
	{"networking.k8s.io", "v1", "NetworkPolicy", "io.k8s.api.networking.v1.NetworkPolicy"},
}

func main() {
	out := flag.String("out", "", "directory to write the schemas into (required)")
	var crds stringList
	flag.Var(&crds, "crd", "a CustomResourceDefinition YAML file to turn into schemas (repeatable)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "k8sschema: -out is required")
		os.Exit(2)
	}
	if err := run(*out, crds); err != nil {
		fmt.Fprintln(os.Stderr, "k8sschema:", err)
		os.Exit(1)
	}
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func run(out string, crds []string) error {
	defs := map[string]any{}
	for name, def := range openapi.GetOpenAPIDefinitions(func(path string) spec.Ref {
		return spec.MustCreateRef("#/definitions/" + path)
	}) {
		m, err := toMap(def)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defs[name] = m
	}
	for _, k := range kinds {
		root, ok := defs[k.model].(map[string]any)
		if !ok {
			return fmt.Errorf("no OpenAPI definition %s (add its package to gen.sh)", k.model)
		}
		s, err := inline(root, defs, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", k.model, err)
		}
		schema := strict(s, true).(map[string]any)
		apiVersion := k.version
		if k.group != "" {
			apiVersion = k.group + "/" + k.version
		}
		pinKind(schema, apiVersion, k.kind)
		// kubeconform's default file naming: {{.ResourceKind}}{{.KindSuffix}}.json
		suffix := "-" + k.version
		if k.group != "" {
			suffix = "-" + strings.Split(k.group, ".")[0] + "-" + k.version
		}
		if err := write(filepath.Join(out, strings.ToLower(k.kind)+suffix+".json"), schema); err != nil {
			return err
		}
	}
	for _, path := range crds {
		if err := fromCRD(out, path); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

// toMap turns a generated definition into plain JSON values.
func toMap(def common.OpenAPIDefinition) (map[string]any, error) {
	b, err := json.Marshal(def.Schema)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// inline replaces every $ref with a copy of the definition it names, so that
// each schema file stands alone (kubeconform's "standalone" layout).
func inline(v any, defs map[string]any, stack []string) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		if ref, ok := t["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/definitions/")
			for _, s := range stack {
				if s == name {
					return nil, fmt.Errorf("recursive type %s: not supported", name)
				}
			}
			def, ok := defs[name]
			if !ok {
				return nil, fmt.Errorf("unknown definition %s (add its package to gen.sh)", name)
			}
			return inline(def, defs, append(stack, name))
		}
		m := make(map[string]any, len(t))
		for k, e := range t {
			x, err := inline(e, defs, stack)
			if err != nil {
				return nil, err
			}
			m[k] = x
		}
		return m, nil
	case []any:
		l := make([]any, len(t))
		for i, e := range t {
			x, err := inline(e, defs, stack)
			if err != nil {
				return nil, err
			}
			l[i] = x
		}
		return l, nil
	default:
		return v, nil
	}
}

// strict drops documentation and Kubernetes extensions, closes objects that
// list their properties, and lets every non-root value be null (the API
// server treats an explicit null as unset; Helm renders empty values so).
func strict(v any, root bool) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			if k == "description" || k == "default" || k == "example" || strings.HasPrefix(k, "x-") {
				continue
			}
			if k == "properties" {
				props := map[string]any{}
				for name, p := range e.(map[string]any) {
					props[name] = strict(p, false)
				}
				m[k] = props
				continue
			}
			m[k] = strict(e, false)
		}
		if _, ok := m["properties"]; ok {
			if _, set := m["additionalProperties"]; !set {
				m["additionalProperties"] = false
			}
		}
		if !root {
			nullable(m)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, e := range t {
			l[i] = strict(e, false)
		}
		return l
	default:
		return v
	}
}

// nullable adds "null" to a schema's types, or a null branch to its oneOf.
func nullable(m map[string]any) {
	switch ty := m["type"].(type) {
	case string:
		if ty != "null" {
			m["type"] = []any{ty, "null"}
		}
	case []any:
		for _, e := range ty {
			if e == "null" {
				return
			}
		}
		m["type"] = append(ty, "null")
	}
	if one, ok := m["oneOf"].([]any); ok && m["type"] == nil {
		m["oneOf"] = append(one, map[string]any{"type": "null"})
	}
}

// pinKind makes a schema accept only its own apiVersion and kind.
func pinKind(schema map[string]any, apiVersion, kind string) {
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		schema["properties"] = props
	}
	props["apiVersion"] = map[string]any{"type": "string", "enum": []any{apiVersion}}
	props["kind"] = map[string]any{"type": "string", "enum": []any{kind}}
	req := map[string]bool{"apiVersion": true, "kind": true}
	if old, ok := schema["required"].([]any); ok {
		for _, r := range old {
			req[r.(string)] = true
		}
	}
	var names []string
	for r := range req {
		names = append(names, r)
	}
	sort.Strings(names)
	list := make([]any, len(names))
	for i, n := range names {
		list[i] = n
	}
	schema["required"] = list
}

// fromCRD writes {group}/{kind}_{version}.json for every served version of a
// CustomResourceDefinition: kubeconform's layout for custom resources.
func fromCRD(out, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd struct {
		Kind string `json:"kind"`
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind string `json:"kind"`
			} `json:"names"`
			Versions []struct {
				Name   string `json:"name"`
				Served bool   `json:"served"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		return err
	}
	if crd.Kind != "CustomResourceDefinition" || len(crd.Spec.Versions) == 0 {
		return fmt.Errorf("not a CustomResourceDefinition with versions")
	}
	for _, v := range crd.Spec.Versions {
		if !v.Served || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		schema := strict(v.Schema.OpenAPIV3Schema, true).(map[string]any)
		pinKind(schema, crd.Spec.Group+"/"+v.Name, crd.Spec.Names.Kind)
		file := filepath.Join(out, crd.Spec.Group, strings.ToLower(crd.Spec.Names.Kind)+"_"+v.Name+".json")
		if err := write(file, schema); err != nil {
			return err
		}
	}
	return nil
}

func write(path string, schema map[string]any) error {
	b, err := json.MarshalIndent(schema, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
