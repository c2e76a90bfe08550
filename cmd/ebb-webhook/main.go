package main

import (
	"github.com/ebb-dev/ebb/internal/options"
	"github.com/ebb-dev/ebb/webhook"
)

func main() { options.Main("ebb-webhook", webhook.DefaultOptions, webhook.Run) }
