package main

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/malachi-log/malachi/broker"
	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
)

const exampleConfig = "malachid.example.toml"

// leafKeys lists the dotted TOML key of every leaf field of the struct
// type t (the keys loadConfig binds as flags).
func leafKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := f.Tag.Get("toml")
		if key == "" {
			continue
		}
		if prefix != "" {
			key = prefix + "." + key
		}
		if f.Type.Kind() == reflect.Struct && f.Type.String() != "time.Duration" {
			keys = append(keys, leafKeys(f.Type, key)...)
			continue
		}
		keys = append(keys, key)
	}
	return keys
}

// TestExampleConfigSetsEveryKey: the example configuration sets every key
// of broker.Config (a key added without an example fails here), and only those.
func TestExampleConfigSetsEveryKey(t *testing.T) {
	var cfg broker.Config
	md, err := toml.DecodeFile(exampleConfig, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		t.Fatalf("%s: keys broker.Config does not have: %v", exampleConfig, und)
	}
	keys := leafKeys(reflect.TypeOf(broker.Config{}), "")
	if len(keys) < 30 {
		t.Fatalf("only %d keys found in Config: %v", len(keys), keys)
	}
	for _, k := range keys {
		if !md.IsDefined(strings.Split(k, ".")...) {
			t.Errorf("%s does not set %s: add it, with a comment", exampleConfig, k)
		}
	}
}

// TestExampleConfigLoads: `malachid --config malachid.example.toml`
// accepts the file as is, started in a directory that holds its broker's
// certificates under certs/ (its relative paths' base).
func TestExampleConfigLoads(t *testing.T) {
	abs, err := filepath.Abs(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l, err := pki.CreateLocal(filepath.Join(dir, "pki"), []meta.BrokerID{1, 2, 3}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(l.BrokerDir(1), filepath.Join(dir, "certs")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	cfg, err := loadConfig([]string{"--config", abs}, io.Discard)
	if err != nil {
		t.Fatalf("malachid --config %s: %v", exampleConfig, err)
	}
	if cfg.ID != 1 || !cfg.Heal.Enabled || len(cfg.Peers) != 3 || cfg.Heal.SettleBatch != broker.DefaultConfig().Heal.SettleBatch {
		t.Fatalf("loaded %+v", cfg)
	}
	def := broker.DefaultConfig()
	if cfg.Raft != def.Raft {
		t.Errorf("the example's [raft] %+v differs from the defaults %+v it documents", cfg.Raft, def.Raft)
	}
	heal := cfg.Heal
	heal.Enabled, heal.DataDir = def.Heal.Enabled, def.Heal.DataDir
	if heal != def.Heal {
		t.Errorf("the example's [heal] %+v differs from the defaults %+v it documents", heal, def.Heal)
	}
}
