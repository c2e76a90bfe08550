package main

import (
	"github.com/ebb-dev/ebb/internal/options"
	"github.com/ebb-dev/ebb/sidecar"
)

func main() { options.Main("ebb-sidecar", sidecar.DefaultOptions, sidecar.Run) }
