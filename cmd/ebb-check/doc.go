// Command ebb-check runs package check with the options from its flags and
// environment (ebb-check -h lists them): the chart's `helm test`.
package main
