// Command ebb-webhook is ebb's control plane: the sidecar-injecting
// admission webhook and the AppRoute controller. It parses its flags
// (environment fallbacks included) and calls webhook.Run; everything else
// lives in package webhook. Run it with -h for the flags.
package main
