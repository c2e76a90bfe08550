package injecttest

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ContainerEnv is c's environment as its process gets it: each literal
// value expanded (KubeletExpand) against the variables before it; a value
// from a field or a source is a stand-in, "from-<name>".
func ContainerEnv(c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			env[e.Name] = "from-" + e.Name
			continue
		}
		env[e.Name] = KubeletExpand(e.Value, env)
	}
	return env
}

// KubeletExpand is the kubelet's rule for a container's env values (and
// command and args), written from its documentation: $$ is a literal $,
// $(NAME) is the value of an earlier variable NAME (left as written when
// there is none), and any other $ stays as it is.
func KubeletExpand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
