// Package federation is ebb-federation: the controller that splits a
// FederatedScale's global min and max replicas into the KEDA ScaledObjects
// of its member clusters and moves max headroom to members at their max
// (the federated autoscaler seed's "Dynamic HPA min/max rebalance").
package federation
