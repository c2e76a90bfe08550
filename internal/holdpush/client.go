package holdpush

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ebb-dev/ebb/internal/holdpush/holdpushpb"
)

// ClientOptions configures a Client.
type ClientOptions struct {
	// Activator names this activator, as "namespace/pod". Required: the scaler
	// keys an activator's counts by it and drops them when its streams end.
	Activator string
	// Resend is the period of full resends. Default DefaultResend; keep it
	// well under the scalers' StaleAfter.
	Resend time.Duration
	// DialOptions for every scaler connection (credentials first of all). No
	// options means plaintext.
	DialOptions []grpc.DialOption
	// Sent, when set, is called for every count a scaler was sent (written
	// to its stream), with the time of the send.
	Sent func(app App, held int64, at time.Time)
	Log  logr.Logger
}

// Client is the activator's side. It keeps one stream per scaler address,
// sends a change to every scaler the moment Set is called (changes made
// while a send is in flight are coalesced into the next), and resends its
// whole table every Resend and after every reconnect.
type Client struct {
	opts ClientOptions

	mu     sync.Mutex
	held   map[App]int64
	peers  map[string]*peer
	closed bool
}

type peer struct {
	addr     string
	dirty    map[App]struct{} // guarded by Client.mu
	needFull bool             // guarded by Client.mu
	sig      chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}
}

// NewClient returns a Client with no scaler address yet; see SetAddresses.
func NewClient(opts ClientOptions) (*Client, error) {
	if opts.Activator == "" {
		return nil, errors.New("holdpush client: Activator is required (the activator pod's namespace/name)")
	}
	if opts.Resend <= 0 {
		opts.Resend = DefaultResend
	}
	if len(opts.DialOptions) == 0 {
		opts.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return &Client{opts: opts, held: map[App]int64{}, peers: map[string]*peer{}}, nil
}

// Set records that this activator now holds held requests for app (negative
// counts are taken as 0) and sends the change to every scaler at once.
func (c *Client) Set(app App, held int64) {
	held = max(held, 0)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[app] == held {
		return
	}
	if held == 0 {
		delete(c.held, app)
	} else {
		c.held[app] = held
	}
	for _, p := range c.peers {
		p.dirty[app] = struct{}{}
		select {
		case p.sig <- struct{}{}:
		default:
		}
	}
}

// SetAddresses sets the scaler addresses (host:port, one per scaler replica)
// to push to: streams to new addresses open, streams to gone ones close.
func (c *Client) SetAddresses(addrs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	want := make(map[string]struct{}, len(addrs))
	for _, a := range addrs {
		want[a] = struct{}{}
		if _, ok := c.peers[a]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		p := &peer{addr: a, dirty: map[App]struct{}{}, needFull: true, sig: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
		c.peers[a] = p
		go c.run(ctx, p)
	}
	for a, p := range c.peers {
		if _, ok := want[a]; !ok {
			p.cancel()
			delete(c.peers, a)
		}
	}
}

// Close ends every stream (each scaler drops this activator's counts after
// its grace) and waits for the streams to finish.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	peers := c.peers
	c.peers = map[string]*peer{}
	c.mu.Unlock()
	for _, p := range peers {
		p.cancel()
	}
	for _, p := range peers {
		<-p.done
	}
}

func (c *Client) run(ctx context.Context, p *peer) {
	defer close(p.done)
	log := c.opts.Log.WithValues("scaler", p.addr)
	conn, err := grpc.NewClient(p.addr, c.opts.DialOptions...)
	if err != nil {
		log.Error(err, "cannot push held counts to this scaler address")
		return
	}
	defer conn.Close()
	backoff := 50 * time.Millisecond
	for {
		started := time.Now()
		err := c.stream(ctx, conn, p)
		if ctx.Err() != nil {
			return
		}
		log.V(1).Info("held-count stream ended; reconnecting", "error", err.Error())
		if time.Since(started) > 10*time.Second {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// stream runs one Push stream until it fails or ctx ends.
func (c *Client) stream(ctx context.Context, conn *grpc.ClientConn, p *peer) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := holdpushpb.NewHoldPushClient(conn).Push(sctx, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	// The server only answers when the stream ends: a receive that returns
	// means the scaler went away, and the next stream resends everything.
	ended := make(chan error, 1)
	go func() { ended <- cs.RecvMsg(&holdpushpb.Ack{}) }()

	c.mu.Lock()
	p.needFull = true
	c.mu.Unlock()
	resend := time.NewTicker(c.opts.Resend)
	defer resend.Stop()
	send := func() error {
		b := c.next(p)
		if b == nil {
			return nil
		}
		if err := cs.Send(b.toWire()); err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("send: %w", <-ended)
			}
			return fmt.Errorf("send: %w", err)
		}
		if c.opts.Sent != nil {
			now := time.Now()
			for _, h := range b.Holds {
				c.opts.Sent(h.App, h.Held, now)
			}
		}
		return nil
	}
	if err := send(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			_ = cs.CloseSend()
			return ctx.Err()
		case err := <-ended:
			return fmt.Errorf("scaler ended the stream: %w", err)
		case <-resend.C:
			c.mu.Lock()
			p.needFull = true
			c.mu.Unlock()
		case <-p.sig:
		}
		if err := send(); err != nil {
			return err
		}
	}
}

// next builds the batch to send to p: the whole table when p needs it, else
// the apps changed since the last send (nil when none).
func (c *Client) next(p *peer) *Batch {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := &Batch{Activator: c.opts.Activator}
	if p.needFull {
		b.Full = true
		b.Holds = make([]Hold, 0, len(c.held))
		for app, n := range c.held {
			b.Holds = append(b.Holds, Hold{App: app, Held: n})
		}
		p.needFull = false
		clear(p.dirty)
		return b
	}
	if len(p.dirty) == 0 {
		return nil
	}
	b.Holds = make([]Hold, 0, len(p.dirty))
	for app := range p.dirty {
		b.Holds = append(b.Holds, Hold{App: app, Held: c.held[app]})
	}
	clear(p.dirty)
	return b
}
