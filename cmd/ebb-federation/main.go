package main

import (
	"github.com/ebb-dev/ebb/federation"
	"github.com/ebb-dev/ebb/internal/options"
)

func main() { options.Main("ebb-federation", federation.DefaultOptions, federation.Run) }
