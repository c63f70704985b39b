package cluster

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/malachi-log/malachi/meta"
	"pgregory.net/rapid"
)

// appendSegment writes what json.Marshal writes, and decodeSegment reads
// it back, by the fast path, to the same segment; any other JSON of a
// segment (spaces, another key order, escapes) still decodes like
// encoding/json.
func TestSegmentCodecMatchesEncodingJSON(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := meta.Segment{
			ID:          meta.SegmentID(rapid.StringMatching(`[A-Za-z0-9._<>&"\\é-]{1,12}`).Draw(rt, "id")),
			StartOffset: rapid.Uint64().Draw(rt, "start"),
			Length:      rapid.Uint64().Draw(rt, "length"),
			ByteSize:    rapid.Int64().Draw(rt, "size"),
			Sealed:      rapid.Bool().Draw(rt, "sealed"),
			Checksum:    meta.Checksum(rapid.SampledFrom([]uint64{0, uint64(meta.CRC32C(rapid.Uint32().Draw(rt, "crc")))}).Draw(rt, "sum")),
			Version:     rapid.Uint64().Draw(rt, "version"),
		}
		if !rapid.Bool().Draw(rt, "nil") {
			s.Replicas = []meta.BrokerID{}
			for _, r := range rapid.SliceOfN(rapid.Uint32(), 0, 4).Draw(rt, "replicas") {
				s.Replicas = append(s.Replicas, meta.BrokerID(r))
			}
		}
		want, err := json.Marshal(&s)
		if err != nil {
			rt.Fatal(err)
		}
		got := appendSegment(nil, &s)
		if !bytes.Equal(got, want) {
			rt.Fatalf("appendSegment\n%s\njson.Marshal\n%s", got, want)
		}
		var back meta.Segment
		if err := decodeSegment(got, &back); err != nil || !reflect.DeepEqual(back, s) {
			rt.Fatalf("decodeSegment(%s) = %+v, %v", got, back, err)
		}
		if plainID(s.ID) && !parseSegment(got, &meta.Segment{}) {
			rt.Fatalf("fast path refused %s", got)
		}
		var indented bytes.Buffer
		json.Indent(&indented, want, "", " ")
		var viaJSON, viaDecode meta.Segment
		json.Unmarshal(indented.Bytes(), &viaJSON)
		if err := decodeSegment(indented.Bytes(), &viaDecode); err != nil || !reflect.DeepEqual(viaDecode, viaJSON) {
			rt.Fatalf("indented: decodeSegment %+v %v, encoding/json %+v", viaDecode, err, viaJSON)
		}
	})
	for _, bad := range []string{
		`{"id":"a","start_offset":01,"length":0,"byte_size":0,"sealed":false,"checksum":"none","replicas":null,"version":0}`,
		`{"id":"a","start_offset":1,"length":0,"byte_size":0,"sealed":false,"checksum":"none","replicas":[1,],"version":0}`,
		`{"id":"a","start_offset":1e3,"length":0,"byte_size":0,"sealed":false,"checksum":"none","replicas":null,"version":0}`,
		`{"id":"a","start_offset":1,"length":0,"byte_size":0,"sealed":false,"checksum":"none","replicas":null,"version":0}x`,
	} {
		if err := decodeSegment([]byte(bad), &meta.Segment{}); err == nil {
			t.Errorf("decodeSegment(%s) succeeded", bad)
		}
	}
}
