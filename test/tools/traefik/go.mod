// Module traefik pins the ingress controller the local test cluster runs,
// Traefik v3, and the Gateway API release it is built against, whose
// standard-channel CRDs the cluster installs. Traefik is built inside its
// own module directory (its go.mod carries replace directives a tools
// module would not apply); this module's go.sum verifies both downloads.
module github.com/ebb-dev/ebb/test/tools/traefik

go 1.26.0

require (
	github.com/traefik/traefik/v3 v3.6.12
	sigs.k8s.io/gateway-api v1.4.0
)
