// compose-lint checks Compose files with compose-go, the loader `docker compose` itself uses:
// the compose-spec JSON schema, interpolation, normalisation and the consistency checks
// (unknown services in depends_on, undefined volumes or networks...).
//
// Usage: compose-lint [-env KEY=VALUE]... [-json] FILE...
// Exit status 0 when every file loads; 1 with one line per problem otherwise.
// -json prints each loaded project, normalised (interpolated, defaults filled in), as JSON
// on its own line instead of the "ok" line, for tests that check what the file means.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
)

type envFlags []string

func (e *envFlags) String() string     { return strings.Join(*e, ",") }
func (e *envFlags) Set(v string) error { *e = append(*e, v); return nil }

func main() {
	var env envFlags
	flag.Var(&env, "env", "KEY=VALUE set for interpolation (repeatable); the OS env is not used")
	asJSON := flag.Bool("json", false, "print the normalised project as JSON")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: compose-lint [-env KEY=VALUE]... FILE...")
		os.Exit(2)
	}
	failed := false
	for _, file := range flag.Args() {
		if err := lint(file, env, *asJSON); err != nil {
			fmt.Printf("%s: FAIL %v\n", file, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func lint(file string, env []string, asJSON bool) error {
	abs, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	// Only the given env: the result must not depend on the caller's shell.
	opts, err := cli.NewProjectOptions(
		[]string{abs},
		cli.WithWorkingDirectory(filepath.Dir(abs)),
		cli.WithEnv(env),
		cli.WithDotEnv,
		cli.WithConsistency(true),
		cli.WithNormalization(true),
		cli.WithInterpolation(true),
	)
	if err != nil {
		return err
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		return err
	}
	if asJSON {
		data, err := project.MarshalJSON()
		if err != nil {
			return err
		}
		fmt.Println(strings.ReplaceAll(string(data), "\n", ""))
		return nil
	}
	names := project.ServiceNames()
	sort.Strings(names)
	fmt.Printf("%s: ok project %q, services %s\n", file, project.Name, strings.Join(names, ", "))
	return nil
}
