package store

import "hash/crc32"

func crc32Update(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }
