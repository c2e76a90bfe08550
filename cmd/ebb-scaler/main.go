package main

import (
	"github.com/ebb-dev/ebb/internal/options"
	"github.com/ebb-dev/ebb/scaler"
)

func main() { options.Main("ebb-scaler", scaler.DefaultOptions, scaler.Run) }
