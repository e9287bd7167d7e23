package memberlist

import "bytes"

type bytesBuffer struct{ bytes.Buffer }
