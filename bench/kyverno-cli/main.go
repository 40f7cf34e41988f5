// Command kyverno is Kyverno's own CLI, built from the Go module proxy only as
// an oracle for bench/kyverno-diff. It contains no Kyverno code: it runs the
// CLI's root command the way upstream cmd/cli/kubectl-kyverno/main.go does.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno/commands"
	"github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno/commands/apply"
	"github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno/experimental"
	"github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno/log"
)

func main() {
	cmd := commands.RootCommand(experimental.IsEnabled())
	if err := log.Configure(); err != nil {
		fmt.Println("Error: Failed to setup logging", err)
		os.Exit(1)
	}
	cmd.PersistentFlags().AddGoFlagSet(flag.CommandLine)
	if err := cmd.Execute(); err != nil {
		if e, ok := err.(apply.WarnExitCodeError); ok {
			os.Exit(e.ExitCode)
		}
		os.Exit(1)
	}
}
