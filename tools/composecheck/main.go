// Command composecheck loads compose files the way `docker compose config`
// does (compose-go: YAML, anchors and merges, interpolation, the Compose
// Specification's JSON schema, references between services, volumes and
// configs) and prints the resolved project as JSON. It needs no Docker
// engine. Exit status 1 and the loader's message when a file is invalid.
//
//	go run . -f ../../deploy/compose/compose.yaml
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	var files multi
	flag.Var(&files, "f", "compose file (repeatable)")
	flag.Parse()
	if len(files) == 0 {
		fmt.Fprintln(os.Stderr, "composecheck: give at least one -f FILE")
		os.Exit(2)
	}
	opts, err := cli.NewProjectOptions(files,
		cli.WithOsEnv,
		cli.WithDotEnv,
		cli.WithResolvedPaths(true),
		cli.WithConsistency(true),
	)
	if err != nil {
		fail(err)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		fail(err)
	}
	out, err := json.MarshalIndent(project, "", "  ")
	if err != nil {
		fail(err)
	}
	os.Stdout.Write(append(out, '\n'))
}

type multi []string

func (m *multi) String() string     { return fmt.Sprint(*m) }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "composecheck:", err)
	os.Exit(1)
}
