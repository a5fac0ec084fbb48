// Command netpolcheck answers, for each connection of a list, whether Kubernetes
// NetworkPolicies admit it, by the policy engine of Cyclonus
// (github.com/mattfenwick/cyclonus/pkg/matcher, the engine behind `cyclonus analyze
// --mode query-traffic` and Kubernetes SIG Network's policy-assistant), so that the
// chart's NetworkPolicies are checked without a cluster or a CNI. This wrapper only
// reads and writes JSON: the command prints tables.
//
//	netpolcheck -policies rendered.yaml -traffic traffic.json
//
// rendered.yaml is any multi-document YAML (kinds other than NetworkPolicy are
// skipped); traffic.json is a list of Cyclonus's matcher.Traffic. It prints a JSON list
// of {"allowed", "ingress", "egress"}, one per connection, in order. Exit status 1 and a
// message on bad input.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	networkingv1 "k8s.io/api/networking/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

type verdict struct {
	Allowed bool `json:"allowed"`
	Ingress bool `json:"ingress"`
	Egress  bool `json:"egress"`
}

func main() {
	policies := flag.String("policies", "", "multi-document YAML holding the NetworkPolicies")
	traffic := flag.String("traffic", "", "JSON list of connections (Cyclonus's matcher.Traffic)")
	flag.Parse()
	if err := run(*policies, *traffic, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "netpolcheck:", err)
		os.Exit(1)
	}
}

func run(policiesFile, trafficFile string, out io.Writer) error {
	if policiesFile == "" || trafficFile == "" {
		return errors.New("give -policies FILE and -traffic FILE")
	}
	src, err := os.ReadFile(policiesFile)
	if err != nil {
		return err
	}
	var netpols []*networkingv1.NetworkPolicy
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(src), 4096)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("%s: %w", policiesFile, err)
		}
		var kind struct{ Kind string }
		if len(raw) == 0 || json.Unmarshal(raw, &kind) != nil || kind.Kind != "NetworkPolicy" {
			continue
		}
		var np networkingv1.NetworkPolicy
		strict := json.NewDecoder(bytes.NewReader(raw))
		strict.DisallowUnknownFields()
		if err := strict.Decode(&np); err != nil {
			return fmt.Errorf("%s: a NetworkPolicy: %w", policiesFile, err)
		}
		netpols = append(netpols, &np)
	}
	b, err := os.ReadFile(trafficFile)
	if err != nil {
		return err
	}
	var conns []*matcher.Traffic
	if err := json.Unmarshal(b, &conns); err != nil {
		return fmt.Errorf("%s: %w", trafficFile, err)
	}
	policy := matcher.BuildNetworkPolicies(true, netpols)
	verdicts := make([]verdict, 0, len(conns))
	for i, c := range conns {
		if c == nil || c.Source == nil || c.Destination == nil {
			return fmt.Errorf("%s: connection %d needs a Source and a Destination", trafficFile, i)
		}
		r := policy.IsTrafficAllowed(c)
		verdicts = append(verdicts, verdict{Allowed: r.IsAllowed(), Ingress: r.Ingress.IsAllowed(), Egress: r.Egress.IsAllowed()})
	}
	return json.NewEncoder(out).Encode(verdicts)
}
