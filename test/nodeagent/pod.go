package nodeagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

type containerKind int

const (
	kindInit    containerKind = iota // runs to completion before the next
	kindSidecar                      // init container with restartPolicy Always
	kindRegular
)

// container is the agent's record of one container of a pod. Only the pod
// worker's goroutine touches it.
type container struct {
	spec *corev1.Container
	kind containerKind
	prog string

	gen          int // increments per process start; stale events are dropped
	cmd          *exec.Cmd
	running      bool
	startedAt    time.Time
	restarts     int32
	started      bool // startup probe passed, or none
	ready        bool // readiness probe passed, or none
	succeeded    bool // an init container that exited 0
	lastTerm     *corev1.ContainerStateTerminated
	waitReason   string
	waitMessage  string
	retryAt      time.Time
	backoff      time.Duration
	stopProbes   context.CancelFunc
	terminating  bool
	startAttempt bool // a start was tried at least once
}

type eventKind int

const (
	evExit eventKind = iota
	evProbe
)

type event struct {
	kind  eventKind
	ctr   *container
	gen   int
	code  int32
	probe probeKind
	ok    bool
}

// podWorker owns one pod on this node from binding to deletion.
type podWorker struct {
	a   *Agent
	uid types.UID

	notify  chan struct{}
	hostsCh chan struct{}
	events  chan event
	done    chan struct{}

	latest chan *corev1.Pod // capacity 1: the newest pod object
	goneCh chan struct{}

	// Owned by run.
	pod        *corev1.Pod
	sb         *sandbox
	volumes    map[string]string
	ctrs       []*container
	startTime  metav1.Time
	conditions map[corev1.PodConditionType]corev1.PodCondition
	written    *corev1.PodStatus
	terminal   bool
}

func newPodWorker(a *Agent, pod *corev1.Pod) *podWorker {
	return &podWorker{
		a: a, uid: pod.UID,
		notify: make(chan struct{}, 1), hostsCh: make(chan struct{}, 1), events: make(chan event, 64),
		done: make(chan struct{}), latest: make(chan *corev1.Pod, 1), goneCh: make(chan struct{}),
		conditions: map[corev1.PodConditionType]corev1.PodCondition{},
	}
}

func (w *podWorker) update(pod *corev1.Pod) {
	select {
	case <-w.latest:
	default:
	}
	w.latest <- pod
}

func (w *podWorker) gone() {
	select {
	case <-w.goneCh:
	default:
		close(w.goneCh)
	}
}

func (w *podWorker) hostsChanged() {
	select {
	case w.hostsCh <- struct{}{}:
	default:
	}
}

func (w *podWorker) wait() { <-w.done }

func (w *podWorker) log() []any {
	return []any{"pod", w.pod.Namespace + "/" + w.pod.Name}
}

func (w *podWorker) run(ctx context.Context) {
	defer close(w.done)
	defer w.a.workerDone(w.uid)
	w.pod = <-w.latest
	w.startTime = metav1.Now()
	for i := range w.pod.Spec.InitContainers {
		c := &w.pod.Spec.InitContainers[i]
		kind := kindInit
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			kind = kindSidecar
		}
		w.ctrs = append(w.ctrs, &container{spec: c, kind: kind, prog: imageProgram(c.Image)})
	}
	for i := range w.pod.Spec.Containers {
		c := &w.pod.Spec.Containers[i]
		w.ctrs = append(w.ctrs, &container{spec: c, kind: kindRegular, prog: imageProgram(c.Image)})
	}
	refresh := time.NewTicker(2 * time.Second)
	defer refresh.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case <-w.goneCh:
			w.terminate(context.WithoutCancel(ctx), 0, false)
			return
		default:
		}
		if ctx.Err() != nil {
			w.terminate(context.WithoutCancel(ctx), 2*time.Second, false)
			return
		}
		if w.pod.DeletionTimestamp != nil {
			grace := 30 * time.Second
			if w.pod.DeletionGracePeriodSeconds != nil {
				grace = time.Duration(*w.pod.DeletionGracePeriodSeconds) * time.Second
			}
			w.terminate(ctx, grace, true)
			return
		}
		next := w.reconcile(ctx)
		w.writeStatus(ctx)
		if !next.IsZero() {
			retry.Reset(time.Until(next))
		}
		select {
		case p := <-w.latest:
			w.pod.ObjectMeta = p.ObjectMeta // the spec of a pod is fixed; keep our pointers into it
			w.pod.Status = p.Status
		case ev := <-w.events:
			w.apply(ev)
		case <-w.hostsCh:
			w.writeHosts()
		case <-refresh.C:
			if w.sb != nil && !w.terminal {
				if err := refreshVolumes(ctx, w.a.cfg.Client, w.pod, w.volumes, &w.a.cfg); err != nil && ctx.Err() == nil {
					w.a.cfg.Log.Error(err, "refresh volumes", w.log()...)
				}
			}
		case <-retry.C:
		case <-w.goneCh:
		case <-ctx.Done():
		}
	}
}

// reconcile starts what should run next and returns when it next needs to
// look again for a restart back-off (zero: no deadline).
func (w *podWorker) reconcile(ctx context.Context) time.Time {
	if w.terminal {
		return time.Time{}
	}
	if w.sb == nil {
		if err := w.createSandbox(ctx); err != nil {
			w.a.cfg.Log.Error(err, "create pod sandbox", w.log()...)
			return time.Now().Add(2 * time.Second)
		}
	}
	var next time.Time
	later := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	initialized := true
	for _, c := range w.ctrs {
		if c.kind == kindRegular {
			break
		}
		if c.kind == kindSidecar {
			if !c.running {
				later(w.start(ctx, c))
			}
			if !c.started {
				initialized = false
				break
			}
			continue
		}
		if c.succeeded {
			continue
		}
		initialized = false
		if !c.running {
			if c.lastTerm != nil && w.pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
				w.finish(ctx)
				return time.Time{}
			}
			later(w.start(ctx, c))
		}
		break
	}
	w.setCondition(corev1.PodInitialized, initialized)
	if !initialized {
		return next
	}
	allDone := true
	for _, c := range w.ctrs {
		if c.kind != kindRegular {
			continue
		}
		if c.running {
			allDone = false
			continue
		}
		if c.lastTerm == nil || w.restarts(c) {
			allDone = false
			later(w.start(ctx, c))
		}
	}
	if allDone {
		w.finish(ctx)
	}
	return next
}

// restarts reports whether an exited regular container is to be restarted.
func (w *podWorker) restarts(c *container) bool {
	switch w.pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return c.lastTerm.ExitCode != 0
	}
	return true
}

// finish ends a pod whose containers will not run again (restartPolicy
// Never or OnFailure): sidecars stop, the sandbox goes, the phase is final.
func (w *podWorker) finish(ctx context.Context) {
	w.terminal = true
	w.stopContainers(ctx, kindSidecar, 5*time.Second)
	w.removeSandbox()
}

func (w *podWorker) createSandbox(ctx context.Context) error {
	addr, err := w.a.ips.get()
	if err != nil {
		return err
	}
	sb, err := createSandbox(strings.TrimPrefix(NetnsName(string(w.uid)), netnsPrefix), addr, &w.a.cfg)
	if err != nil {
		w.a.ips.put(addr)
		return err
	}
	w.sb = sb
	// Fields the downward API and volumes read.
	w.pod.Status.PodIP = addr.String()
	w.pod.Status.HostIP = w.a.cfg.NodeIP
	w.writeHosts()
	vols, err := materializeVolumes(ctx, w.a.cfg.Client, w.pod, sb.dir, &w.a.cfg)
	if err != nil {
		w.removeSandbox()
		return err
	}
	w.volumes = vols
	return nil
}

func (w *podWorker) removeSandbox() {
	if w.sb == nil {
		return
	}
	w.sb.remove()
	w.a.ips.put(w.sb.ip)
	w.sb = nil
}

func (w *podWorker) writeHosts() {
	if w.sb == nil {
		return
	}
	if err := w.sb.writeHosts(w.a.hostsFor(w.pod.Namespace, w.pod.Name, w.sb.ip.String())); err != nil {
		w.a.cfg.Log.Error(err, "write hosts file", w.log()...)
	}
}

// start runs the container's process unless it is backing off; it returns
// when to try again if it could not start now.
func (w *podWorker) start(ctx context.Context, c *container) time.Time {
	if now := time.Now(); now.Before(c.retryAt) {
		return c.retryAt
	}
	c.startAttempt = true
	prog := filepath.Join(w.a.cfg.BinDir, c.prog)
	if _, err := os.Stat(prog); err != nil {
		c.waitReason, c.waitMessage = "ErrImageNeverPull", fmt.Sprintf("image %q: no program %s (the node agent runs images from its bin directory)", c.spec.Image, prog)
		c.retryAt = time.Now().Add(2 * time.Second)
		return c.retryAt
	}
	// The informer's copy may predate our first status write.
	w.pod.Status.PodIP, w.pod.Status.HostIP = w.sb.ip.String(), w.a.cfg.NodeIP
	env, vars, err := containerEnv(ctx, w.a.cfg.Client, w.pod, c.spec, &w.a.cfg)
	if err != nil {
		c.waitReason, c.waitMessage = "CreateContainerConfigError", err.Error()
		c.retryAt = time.Now().Add(2 * time.Second)
		return c.retryAt
	}
	var argv []string
	if len(c.spec.Command) > 1 {
		argv = append(argv, c.spec.Command[1:]...)
	}
	argv = append(argv, c.spec.Args...)
	for i := range argv {
		argv[i] = expand(argv[i], vars)
	}
	args := []string{"netns", "exec", w.sb.netns}
	if len(c.spec.VolumeMounts) > 0 {
		script, err := mountScript(c.spec, w.volumes, w.a.recordMount)
		if err != nil {
			c.waitReason, c.waitMessage = "CreateContainerConfigError", err.Error()
			c.retryAt = time.Now().Add(2 * time.Second)
			return c.retryAt
		}
		args = append(args, "/bin/sh", "-c", script)
	}
	args = append(args, prog)
	args = append(args, argv...)
	logPath := filepath.Join(w.a.cfg.LogDir, fmt.Sprintf("%s_%s_%s.log", w.pod.Namespace, w.pod.Name, c.spec.Name))
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.waitReason, c.waitMessage = "RunContainerError", err.Error()
		c.retryAt = time.Now().Add(2 * time.Second)
		return c.retryAt
	}
	cmd := exec.Command("ip", args...)
	cmd.Env = env
	cmd.Dir = w.sb.dir
	if c.spec.WorkingDir != "" {
		if st, err := os.Stat(c.spec.WorkingDir); err == nil && st.IsDir() {
			cmd.Dir = c.spec.WorkingDir
		}
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		c.waitReason, c.waitMessage = "RunContainerError", err.Error()
		c.retryAt = time.Now().Add(2 * time.Second)
		return c.retryAt
	}
	c.gen++
	gen := c.gen
	c.cmd, c.running, c.startedAt = cmd, true, time.Now()
	c.waitReason, c.waitMessage = "", ""
	c.started = c.spec.StartupProbe == nil
	c.ready = c.spec.ReadinessProbe == nil && c.kind != kindInit
	c.terminating = false
	go func() {
		err := cmd.Wait()
		logFile.Close()
		code := int32(0)
		if err != nil {
			code = 1
			if ee, ok := err.(*exec.ExitError); ok {
				code = int32(ee.ExitCode())
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					code = 128 + int32(ws.Signal())
				}
			}
		}
		w.events <- event{kind: evExit, ctr: c, gen: gen, code: code}
	}()
	probeCtx, cancel := context.WithCancel(ctx)
	c.stopProbes = cancel
	w.startProbes(probeCtx, c, gen)
	w.a.cfg.Log.V(1).Info("container started", append(w.log(), "container", c.spec.Name, "pid", cmd.Process.Pid)...)
	return time.Time{}
}

func (w *podWorker) apply(ev event) {
	c := ev.ctr
	if ev.gen != c.gen {
		return
	}
	switch ev.kind {
	case evExit:
		c.running, c.ready = false, false
		if c.stopProbes != nil {
			c.stopProbes()
		}
		reason := "Completed"
		if ev.code != 0 {
			reason = "Error"
		}
		c.lastTerm = &corev1.ContainerStateTerminated{ExitCode: ev.code, Reason: reason, StartedAt: metav1.NewTime(c.startedAt), FinishedAt: metav1.Now(), ContainerID: w.containerID(c)}
		if c.kind == kindInit && ev.code == 0 {
			c.succeeded = true
			return
		}
		if c.terminating {
			return
		}
		// Back-off like the kubelet's, scaled down (0.5 s doubling to 10 s) so
		// tests see crash loops without minutes of waiting.
		if time.Since(c.startedAt) > 10*time.Second {
			c.backoff = 0
		}
		if c.backoff == 0 {
			c.backoff = 500 * time.Millisecond
		} else if c.backoff < 10*time.Second {
			c.backoff *= 2
		}
		c.restarts++
		c.retryAt = time.Now().Add(c.backoff)
		c.waitReason = "CrashLoopBackOff"
		c.waitMessage = fmt.Sprintf("back-off %s restarting failed container %s", c.backoff, c.spec.Name)
	case evProbe:
		switch ev.probe {
		case probeStartup:
			c.started = ev.ok
			if !ev.ok {
				w.kill(c, "startup probe failed")
			}
		case probeReadiness:
			c.ready = ev.ok
		case probeLiveness:
			if !ev.ok {
				w.kill(c, "liveness probe failed")
			}
		}
	}
}

// kill ends a container that failed its probes; its exit counts as a crash.
func (w *podWorker) kill(c *container, why string) {
	if !c.running {
		return
	}
	w.a.cfg.Log.Info("killing container", append(w.log(), "container", c.spec.Name, "reason", why)...)
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
}

// terminate stops the pod as the kubelet does: preStop hooks and SIGTERM to
// the app containers, SIGKILL at the grace deadline, then the sidecars in
// reverse order; then it removes the sandbox and, if deleteFromAPI, the pod.
func (w *podWorker) terminate(ctx context.Context, grace time.Duration, deleteFromAPI bool) {
	deadline := time.Now().Add(grace)
	w.runPreStop(ctx, deadline)
	w.stopContainers(ctx, kindRegular, time.Until(deadline))
	w.stopContainers(ctx, kindSidecar, max(time.Until(deadline), 2*time.Second))
	w.stopContainers(ctx, kindInit, 0)
	w.removeSandbox()
	if !deleteFromAPI {
		return
	}
	w.writeStatus(ctx)
	err := w.a.cfg.Client.CoreV1().Pods(w.pod.Namespace).Delete(ctx, w.pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &w.uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		w.a.cfg.Log.Error(err, "delete terminated pod", w.log()...)
	}
}

// stopContainers sends SIGTERM to every running container of kind (sidecars
// in reverse order of start) and SIGKILL to what still runs after grace.
func (w *podWorker) stopContainers(ctx context.Context, kind containerKind, grace time.Duration) {
	var running []*container
	for i := len(w.ctrs) - 1; i >= 0; i-- {
		c := w.ctrs[i]
		if c.kind == kind && c.running {
			running = append(running, c)
		}
	}
	if len(running) == 0 {
		return
	}
	for _, c := range running {
		c.terminating = true
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	}
	timeout := time.NewTimer(grace)
	defer timeout.Stop()
	for {
		alive := 0
		for _, c := range running {
			if c.running {
				alive++
			}
		}
		if alive == 0 {
			return
		}
		select {
		case ev := <-w.events:
			w.apply(ev)
			w.writeStatus(ctx)
		case <-timeout.C:
			for _, c := range running {
				if c.running {
					_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
				}
			}
			timeout.Reset(time.Hour)
		}
	}
}

func (w *podWorker) containerID(c *container) string {
	return fmt.Sprintf("ebb://%s/%s/%d", w.uid, c.spec.Name, c.gen)
}

func (w *podWorker) setCondition(t corev1.PodConditionType, ok bool) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	if old, found := w.conditions[t]; found && old.Status == status {
		return
	}
	w.conditions[t] = corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.Now()}
}

// status computes the pod's status from the containers' records.
func (w *podWorker) status() corev1.PodStatus {
	s := corev1.PodStatus{
		HostIP: w.a.cfg.NodeIP, HostIPs: []corev1.HostIP{{IP: w.a.cfg.NodeIP}},
		StartTime: &w.startTime, QOSClass: w.pod.Status.QOSClass,
	}
	if w.sb != nil {
		s.PodIP = w.sb.ip.String()
		s.PodIPs = []corev1.PodIP{{IP: s.PodIP}}
	} else if w.terminal {
		s.PodIP, s.PodIPs = w.pod.Status.PodIP, w.pod.Status.PodIPs
	}
	allReady, anyStarted, anyRunning := true, false, false
	failed := false
	for _, c := range w.ctrs {
		cs := corev1.ContainerStatus{
			Name: c.spec.Name, Image: c.spec.Image, ImageID: "ebb-bin://" + c.prog,
			RestartCount: c.restarts, Ready: c.running && c.ready, Started: ptr.To(c.running && c.started),
		}
		switch {
		case c.running:
			cs.ContainerID = w.containerID(c)
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
		case c.lastTerm != nil && (c.succeeded || w.terminal || c.terminating || (c.kind == kindRegular && !w.restarts(c))):
			cs.ContainerID = c.lastTerm.ContainerID
			cs.State.Terminated = c.lastTerm
		case c.waitReason != "":
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: c.waitReason, Message: c.waitMessage}
		case c.kind == kindRegular:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		if c.lastTerm != nil && cs.State.Terminated == nil {
			cs.LastTerminationState.Terminated = c.lastTerm
		}
		if c.kind == kindInit {
			cs.Ready = c.succeeded
			s.InitContainerStatuses = append(s.InitContainerStatuses, cs)
			continue
		}
		if !cs.Ready {
			allReady = false
		}
		if c.kind == kindSidecar {
			s.InitContainerStatuses = append(s.InitContainerStatuses, cs)
			continue
		}
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
		anyStarted = anyStarted || c.startAttempt && (c.running || c.lastTerm != nil)
		anyRunning = anyRunning || c.running
		if c.lastTerm != nil && c.lastTerm.ExitCode != 0 {
			failed = true
		}
	}
	switch {
	case w.terminal && failed:
		s.Phase = corev1.PodFailed
	case w.terminal:
		s.Phase = corev1.PodSucceeded
	case anyStarted || anyRunning:
		s.Phase = corev1.PodRunning
	default:
		s.Phase = corev1.PodPending
	}
	w.setCondition(corev1.PodScheduled, true)
	w.setCondition(corev1.PodReadyToStartContainers, w.sb != nil)
	w.setCondition(corev1.ContainersReady, allReady && !w.terminal)
	w.setCondition(corev1.PodReady, allReady && !w.terminal)
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		if c, ok := w.conditions[t]; ok {
			s.Conditions = append(s.Conditions, c)
		}
	}
	// Keep conditions other writers own (DisruptionTarget, readiness gates).
	for _, c := range w.pod.Status.Conditions {
		if _, ours := w.conditions[c.Type]; !ours {
			s.Conditions = append(s.Conditions, c)
		}
	}
	return s
}

// writeStatus sends the pod's status to the API server when it changed.
func (w *podWorker) writeStatus(ctx context.Context) {
	s := w.status()
	if w.written != nil && equality.Semantic.DeepEqual(*w.written, s) {
		return
	}
	pods := w.a.cfg.Client.CoreV1().Pods(w.pod.Namespace)
	pod := w.pod.DeepCopy()
	pod.Status = s
	for attempt := 0; attempt < 3; attempt++ {
		_, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if err == nil {
			w.written = &s
			return
		}
		if apierrors.IsNotFound(err) || ctx.Err() != nil {
			return
		}
		if !apierrors.IsConflict(err) {
			w.a.cfg.Log.Error(err, "update pod status", w.log()...)
			return
		}
		fresh, gerr := pods.Get(ctx, w.pod.Name, metav1.GetOptions{})
		if gerr != nil {
			return
		}
		if fresh.UID != w.uid {
			return
		}
		w.pod.ObjectMeta = fresh.ObjectMeta
		pod = fresh
		pod.Status = s
	}
}
