package main

import (
	"github.com/ebb-dev/ebb/check"
	"github.com/ebb-dev/ebb/internal/options"
)

func main() { options.Main("ebb-check", check.DefaultOptions, check.Run) }
