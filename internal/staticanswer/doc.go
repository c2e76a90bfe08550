// Package staticanswer owns static responses: rules that match a request
// (path exact or by prefix, method, headers, in the shape of Gateway API's
// HTTPRouteMatch) and the fixed answer ebb gives for it without the app.
// The activator answers them while an app is at zero, the sidecar answers
// the "Always" ones while it is warm. Compile validates a rule set and
// precomputes each answer's bytes; Match finds the rule of a request.
//
// Invariants:
//   - A request path that is not in canonical form (percent-encoding, an
//     empty, "." or ".." segment, a backslash, a ';' parameter, a target
//     that is not an absolute path) matches no rule, so no encoding of a
//     path makes a request pass for a probe's; the query is not matched.
//   - A rule with header conditions never exempts a forwarded request from
//     counting (Rule.Exempts): a client chooses its headers.
//   - An answer's framing is ebb's own: the rules cannot set Content-Length,
//     Transfer-Encoding, Connection or any other hop-by-hop header.
//
// It has no Kubernetes dependency: the sidecar links it.
package staticanswer
