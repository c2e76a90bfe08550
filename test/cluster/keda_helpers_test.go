package cluster_test

import (
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

var errWatchClosed = errors.New("deployment watch closed")

type timeoutError struct {
	want  int32
	after time.Duration
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("deployment did not reach replicas=%d within %s", e.want, e.after)
}

func replicasOf(o runtime.Object) *int32 {
	if d, ok := o.(*appsv1.Deployment); ok {
		return d.Spec.Replicas
	}
	return nil
}
