// Package wire reads and edits the bytes of the requests and answers the
// front door passes on, without decoding them whole: the few top-level
// keys of a request body it routes by (ReadKeys) and the edits it makes
// there (SetModel, AskUsage, Apply), the JSON scanner they stand on
// (EachKey, EachElem: a walk over raw bytes that allocates nothing), what
// a whole answer says of its tokens and finish (Sniff into a Tally), and
// the key of the conversation a request belongs to (ConversationKey).
//
// Its functions are pure over bytes: the package knows no server, no
// head, no tier and no metric. Reading a streamed answer event by event is
// package stream's, which stands on this one.
package wire
