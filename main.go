// Command anvil is Anvil: an Ironic-compatible bare-metal API, a conductor
// that drives BMCs, and a self-service portal, in one binary.
package main

import (
	"os"

	"github.com/anvilproject/anvil/server/cli"
)

func main() { os.Exit(cli.Execute()) }
