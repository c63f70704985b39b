package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/malachi-log/malachi/broker"
)

// loadConfig builds the configuration from defaults, the file named by
// --config (if any), then the other flags, and validates it. Every error
// wraps broker.ErrConfig and names the key and value.
func loadConfig(args []string, stderr io.Writer) (broker.Config, error) {
	cfg := broker.DefaultConfig()
	fs := flag.NewFlagSet("malachid", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "TOML configuration file")
	set := map[string]string{}
	var order []string
	bindFlags(fs, reflect.ValueOf(&cfg).Elem(), "", set, &order)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, fmt.Errorf("%w: %v", broker.ErrConfig, err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("%w: unexpected argument %q", broker.ErrConfig, fs.Arg(0))
	}
	if *path != "" {
		md, err := toml.DecodeFile(*path, &cfg)
		if err != nil {
			return cfg, fmt.Errorf("%w: %s: %v", broker.ErrConfig, *path, err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return cfg, fmt.Errorf("%w: %s: unknown key %q", broker.ErrConfig, *path, und[0].String())
		}
	}
	for _, key := range order {
		if err := setKey(reflect.ValueOf(&cfg).Elem(), key, set[key]); err != nil {
			return cfg, err
		}
	}
	if cfg.Heal.DataDir == "" {
		cfg.Heal.DataDir = cfg.DataDir
	}
	if cfg.DataDir != "" {
		cfg.DataDir = filepath.Clean(cfg.DataDir)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	// The certificates are read here, before anything is created under
	// data_dir: missing, unreadable or foreign ones are a bad configuration.
	if !cfg.Insecure {
		if _, err := cfg.LoadCerts(); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// pending records a flag's raw value; it is applied after the file.
type pending struct {
	key    string
	isBool bool
	set    map[string]string
	order  *[]string
}

func (p pending) String() string { return "" }
func (p pending) Set(s string) error {
	if _, ok := p.set[p.key]; !ok {
		*p.order = append(*p.order, p.key)
	}
	p.set[p.key] = s
	return nil
}
func (p pending) IsBoolFlag() bool { return p.isBool }

// bindFlags registers a flag for every leaf key of the struct v.
func bindFlags(fs *flag.FlagSet, v reflect.Value, prefix string, set map[string]string, order *[]string) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := f.Tag.Get("toml")
		if key == "" {
			continue
		}
		if prefix != "" {
			key = prefix + "." + key
		}
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct {
			bindFlags(fs, fv, key, set, order)
			continue
		}
		usage := fmt.Sprintf("config key %s (default %v)", key, fv.Interface())
		fs.Var(pending{key: key, isBool: fv.Kind() == reflect.Bool, set: set, order: order}, key, usage)
	}
}

// setKey parses s into the field named by the dotted key.
func setKey(v reflect.Value, key, s string) error {
	bad := func(why string) error { return fmt.Errorf("%w: --%s = %q: %s", broker.ErrConfig, key, s, why) }
	parts := strings.Split(key, ".")
	for _, p := range parts {
		found := false
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			if t.Field(i).Tag.Get("toml") == p {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return bad("unknown key")
		}
	}
	if v.Type() == reflect.TypeOf(time.Duration(0)) {
		d, err := time.ParseDuration(s)
		if err != nil {
			return bad("want a duration such as 500ms or 2s")
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return bad("want true or false")
		}
		v.SetBool(b)
	case reflect.String:
		v.SetString(s)
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v.OverflowInt(n) {
			return bad("want an integer")
		}
		v.SetInt(n)
	case reflect.Uint32, reflect.Uint64, reflect.Uint:
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || v.OverflowUint(n) {
			return bad("want a non-negative integer")
		}
		v.SetUint(n)
	case reflect.Slice:
		var out []string
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				out = append(out, e)
			}
		}
		v.Set(reflect.ValueOf(out))
	default:
		return bad("unsupported key type")
	}
	return nil
}
