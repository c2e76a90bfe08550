package options

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type testOptions struct {
	Name       string
	Count      int
	Wait       time.Duration
	On         bool
	Peers      []string
	Kubeconfig string
}

func parse(args []string, env map[string]string, validate func(*testOptions) error) (testOptions, *Set, error) {
	o := testOptions{Name: "default", Count: 3, Wait: time.Second, On: true}
	s := New("prog", func(k string) string { return env[k] })
	s.String(&o.Name, "name", "a name")
	s.Int(&o.Count, "count", "a count")
	s.Duration(&o.Wait, "wait", "a wait")
	s.Bool(&o.On, "on", "a switch")
	s.List(&o.Peers, "peers", "some peers")
	s.String(&o.Kubeconfig, "kubeconfig", "a kubeconfig")
	s.Env("kubeconfig", "KUBECONFIG")
	err := s.Parse(args, func() error {
		if validate == nil {
			return nil
		}
		return validate(&o)
	})
	return o, s, err
}

func TestFlagThenEnvironmentThenDefault(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want testOptions
	}{
		"defaults": {want: testOptions{Name: "default", Count: 3, Wait: time.Second, On: true}},
		"env": {env: map[string]string{"EBB_NAME": "e", "EBB_COUNT": "4", "EBB_WAIT": "2s", "EBB_ON": "false", "EBB_PEERS": "a:1, ,b:2", "KUBECONFIG": "/k"},
			want: testOptions{Name: "e", Count: 4, Wait: 2 * time.Second, On: false, Peers: []string{"a:1", "b:2"}, Kubeconfig: "/k"}},
		"flag wins": {args: []string{"--name=f", "--count", "5", "--on=false"}, env: map[string]string{"EBB_NAME": "e", "EBB_COUNT": "4"},
			want: testOptions{Name: "f", Count: 5, Wait: time.Second, On: false}},
		"empty env is unset": {env: map[string]string{"EBB_NAME": ""}, want: testOptions{Name: "default", Count: 3, Wait: time.Second, On: true}},
		"an explicit env name replaces the EBB_ one": {env: map[string]string{"EBB_KUBECONFIG": "/ignored"},
			want: testOptions{Name: "default", Count: 3, Wait: time.Second, On: true}},
	} {
		t.Run(name, func(t *testing.T) {
			got, _, err := parse(tc.args, tc.env, nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEveryProblemAtOnceNamed(t *testing.T) {
	env := map[string]string{"EBB_COUNT": "many", "EBB_WAIT": "soon", "EBB_ON": "maybe"}
	o, _, err := parse([]string{"stray"}, env, func(o *testOptions) error {
		if o.Count != 3 || o.Wait != time.Second {
			return errors.New("a bad variable changed the value")
		}
		return errors.New("--name: validated")
	})
	if err == nil {
		t.Fatal("accepted bad values")
	}
	for _, want := range []string{
		`unexpected arguments ["stray"]`,
		`EBB_COUNT="many" (--count): not an integer`,
		`EBB_WAIT="soon" (--wait): not a duration`,
		`EBB_ON="maybe" (--on): not a boolean`,
		"--name: validated",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if o.Count != 3 {
		t.Errorf("count %d after a bad variable, want the default 3", o.Count)
	}
	if _, _, err := parse([]string{"--count=x"}, nil, nil); err == nil || !strings.Contains(err.Error(), "count") {
		t.Errorf("bad flag: %v, want an error naming it", err)
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		if _, _, err := parse([]string{arg}, nil, nil); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: %v, want flag.ErrHelp", arg, err)
		}
	}
	_, s, _ := parse(nil, nil, nil)
	var b strings.Builder
	s.Usage(&b)
	for _, want := range []string{"--count int", "(env EBB_COUNT, default 3)", "--kubeconfig string", "(env KUBECONFIG)", "--peers value", "(env EBB_PEERS)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, b.String())
		}
	}
}

type completed struct {
	Listen string
	Port   string // the port of Listen unless given
}

func (o *completed) Bind(s *Set) {
	s.String(&o.Listen, "listen", "address")
	s.String(&o.Port, "port", "port")
}

func (o *completed) Complete() {
	if o.Port == "" {
		_, o.Port, _ = strings.Cut(o.Listen, ":")
	}
}

func (o *completed) Validate() error {
	if o.Port == "" {
		return errors.New("--port: empty")
	}
	return nil
}

// Parse completes the options from the parsed values, then validates.
func TestParseCompletesThenValidates(t *testing.T) {
	got, err := Parse("prog", completed{Listen: ":80"}, []string{"--listen=:9000"}, func(string) string { return "" })
	if err != nil || got.Port != "9000" {
		t.Errorf("got %+v, %v; want port 9000 from --listen", got, err)
	}
	if _, err := Parse("prog", completed{}, nil, func(string) string { return "" }); err == nil {
		t.Error("Validate not called")
	}
	var b strings.Builder
	WriteUsage(&b, "prog", completed{Listen: ":80"})
	if !strings.Contains(b.String(), "(env EBB_LISTEN, default :80)") {
		t.Errorf("usage:\n%s", b.String())
	}
}

func TestCheckListen(t *testing.T) {
	for addr, ok := range map[string]bool{":9090": true, "127.0.0.1:0": true, "[::1]:65535": true, ":65536": false, ":http": false, "9090": false, "": false} {
		if err := CheckListen(addr); (err == nil) != ok {
			t.Errorf("CheckListen(%q) = %v", addr, err)
		}
	}
}
