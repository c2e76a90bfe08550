package main

import (
	"github.com/ebb-dev/ebb/activator"
	"github.com/ebb-dev/ebb/internal/options"
)

func main() { options.Main("ebb-activator", activator.DefaultOptions, activator.Run) }
