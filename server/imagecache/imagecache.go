// Package imagecache keeps the instance images the conductor downloads
// itself for Ironic's image_download_source=local, and serves each to
// the ramdisk agent at a per-deploy address. Images are stored under
// their checksum, so a second deploy of the same image reuses the file;
// each deploy gets a random token, the only secret in its URL (the agent
// has no credentials), which lives only while that deploy writes the
// image. Tokens live in the directory, not in memory, so conductors
// sharing it (replicas on one ReadWriteMany volume) serve each other's.
package imagecache

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RoutePrefix is where Anvil serves cached images: RoutePrefix + token.
const RoutePrefix = "/images/"

// Defaults unless configured: a cache of 20 GiB holds a few cloud images
// (and so is the largest single image); an hour downloads 20 GiB at
// about 50 Mbit/s.
const (
	DefaultMaxBytes = 20 << 30
	DefaultTimeout  = time.Hour
)

// incoming holds downloads until verified; inside Dir so the final
// rename stays on one file system and is atomic.
const incoming = ".incoming"

// tokens holds one hard link per live token, named after it, to the file
// it serves. In the directory rather than in a conductor's memory so
// that every conductor sharing the directory serves every token: an
// agent's fetch through a load balancer lands on any replica. A link
// rather than a name so that the bytes stay while the token lives even
// if another conductor evicts or replaces the file, and so that any
// conductor sees a file is in use (its link count) and keeps it.
const tokens = ".tokens"

// staleToken is the age past which a token's link is removed as left
// behind by a conductor that stopped before its Unlink (killed mid
// deploy). A deploy's agent downloads its image within hours (the
// server's write timeout for one is 6 h); a day is well past that.
const staleToken = 24 * time.Hour

// Algos are the checksum algorithms the cache verifies, as Ironic names
// them (image_os_hash_algo).
var Algos = map[string]func() hash.Hash{"md5": md5.New, "sha1": sha1.New, "sha256": sha256.New, "sha384": sha512.New384, "sha512": sha512.New}

// algoByLength names the algorithm of a bare image_checksum by its
// length, as the agent does.
var algoByLength = map[int]string{32: "md5", 40: "sha1", 64: "sha256", 96: "sha384", 128: "sha512"}

// AlgoOf names the algorithm of a bare checksum by its hex length, or ""
// when no algorithm has that length.
func AlgoOf(sum string) string { return algoByLength[len(sum)] }

var (
	hexRE   = regexp.MustCompile(`^[0-9a-f]+$`)
	tokenRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// keyRE's last part is the project's tag (projectTag); files cached
	// before it existed lack it and share one tag, "".
	keyRE = regexp.MustCompile(`^(?:md5|sha1|sha256|sha384|sha512)-[0-9a-f]{32,128}-[0-9a-f]{16}(?:-([0-9a-f]{8}))?$`)
)

// Checksum is what the node says the image's bytes hash to.
type Checksum struct {
	// Field names where it came from (instance_info.image_os_hash_value
	// or instance_info.image_checksum), for messages.
	Field string
	Algo  string // a key of Algos
	Value string // hex
}

// Cache keeps images as files named ALGO-HEX under Dir.
type Cache struct {
	Dir string
	// MaxBytes bounds the files kept together, and so the largest image.
	MaxBytes int64
	// Timeout bounds one download, from request to verified file.
	Timeout time.Duration
	// Client downloads; nil means http.DefaultClient's behaviour.
	Client *http.Client
	// Metrics counts hits, misses, failures and evictions; nil none.
	Metrics *Metrics

	mu   sync.Mutex
	keys map[string]*sync.Mutex // one per image being fetched or read
}

// MismatchError is a download whose bytes do not hash to the checksum
// the node gave.
type MismatchError struct {
	Source   string
	Sum      Checksum
	Computed string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("image %s does not match %s: its %s is %s, not %s", e.Source, e.Sum.Field, e.Sum.Algo, e.Computed, e.Sum.Value)
}

// Summary is the mismatch without the digest of what was fetched, for
// last_error and the history a project reads: whoever names a URL and a
// wrong checksum would otherwise read back a digest of whatever answers
// there, and with it deploy that content. Error(), digest included,
// stays in history's detail for system scope.
func (e *MismatchError) Summary() string {
	return fmt.Sprintf("image %s does not match its checksum (%s %s)", e.Source, e.Sum.Field, e.Sum.Value)
}

// Name is the cache's file for the image at src with checksum sum,
// fetched for project: the checksum and the source both, as Ironic keys
// its cache by the image's href (by checksum alone, anyone who learnt
// another tenant's image checksum could deploy that image from a URL of
// their own while it is cached), and the project's tag, which eviction
// shares the cache by.
func Name(project, src string, sum Checksum) string {
	h := sha256.Sum256([]byte(src))
	return sum.Algo + "-" + strings.ToLower(sum.Value) + "-" + hex.EncodeToString(h[:8]) + "-" + projectTag(project)
}

// projectTag names project in file names: short, and the same for every
// conductor sharing a cache directory.
func projectTag(project string) string {
	h := sha256.Sum256([]byte(project))
	return hex.EncodeToString(h[:4])
}

// Fetch makes sure the image at src is in the cache for project (the
// node's lessee, else its owner), downloading and verifying it unless
// that source's file with its checksum is there, and returns a new token
// serving it until Unlink. Concurrent fetches of the same checksum
// download it once: the others wait and reuse the file. (Conductors
// sharing the directory may each download it; the last rename wins, and
// the bytes are the same.)
func (c *Cache) Fetch(ctx context.Context, project, src string, sum Checksum) (string, error) {
	newHash := Algos[sum.Algo]
	sum.Value = strings.ToLower(sum.Value)
	if newHash == nil || newHash().Size()*2 != len(sum.Value) || !hexRE.MatchString(sum.Value) {
		return "", fmt.Errorf("image %s: %s %q is not a checksum the image cache can verify (md5, sha1, sha256, sha384 or sha512 in hex)", src, sum.Field, sum.Value)
	}
	if c.Dir == "" {
		return "", errors.New("the image cache has no directory (--image-cache-dir)")
	}
	file := filepath.Join(c.Dir, Name(project, src, sum))
	tag := projectTag(project)
	kl := c.keyLock(file)
	kl.Lock()
	defer kl.Unlock()
	c.mu.Lock()
	if _, err := os.Stat(file); err == nil {
		// Reused: now its most recent use, for eviction.
		now := time.Now()
		_ = os.Chtimes(file, now, now)
		tok, err := c.link(file)
		c.mu.Unlock()
		// A file another conductor evicted since the Stat is gone:
		// download it again.
		if !errors.Is(err, fs.ErrNotExist) {
			c.Metrics.hit()
			return tok, err
		}
	} else {
		c.mu.Unlock()
	}
	c.Metrics.miss()
	tmp, err := c.download(ctx, tag, src, sum, newHash())
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp) // a no-op once renamed
	c.mu.Lock()
	defer c.mu.Unlock()
	// Linked before it is renamed into place, so no other conductor's
	// eviction can take it in between: it is in use from the start.
	tok, err := c.link(tmp)
	if err != nil {
		c.Metrics.failed(failStore)
		return "", err
	}
	if err := os.Rename(tmp, file); err != nil {
		c.Metrics.failed(failStore)
		c.Unlink(tok)
		return "", fmt.Errorf("image cache: %w", err)
	}
	c.evictLocked(tag, 0)
	return tok, nil
}

func (c *Cache) keyLock(file string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[string]*sync.Mutex{}
	}
	l := c.keys[file]
	if l == nil {
		l = &sync.Mutex{}
		c.keys[file] = l
	}
	return l
}

func (c *Cache) maxBytes() int64 {
	if c.MaxBytes > 0 {
		return c.MaxBytes
	}
	return DefaultMaxBytes
}

// download streams src into a temporary file, hashing as it writes, and
// returns the file once its bytes match sum; on any failure nothing is
// left behind.
func (c *Cache) download(ctx context.Context, tag, src string, sum Checksum, h hash.Hash) (_ string, err error) {
	// Each failure below sets why it failed before it returns.
	reason := failFetch
	defer func() {
		if err != nil {
			c.Metrics.failed(reason)
		}
	}()
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", src, err)
	}
	cl := c.Client
	if cl == nil {
		cl = http.DefaultClient
	}
	resp, err := cl.Do(req)
	if err != nil {
		return "", fmt.Errorf("downloading image %s: %w", src, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("downloading image %s: the server answered %s", src, resp.Status)
	}
	max := c.maxBytes()
	tooBig := fmt.Errorf("image %s is larger than the image cache's %d bytes (--image-cache-max-bytes)", src, max)
	if resp.ContentLength > max {
		reason = failTooLarge
		return "", tooBig
	}
	if resp.ContentLength > 0 {
		// Room for it first, so the cache stays within its size.
		c.mu.Lock()
		c.evictLocked(tag, resp.ContentLength)
		c.mu.Unlock()
	}
	reason = failStore
	tmpDir := filepath.Join(c.Dir, incoming)
	if err := os.MkdirAll(tmpDir, 0o750); err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	f, err := os.CreateTemp(tmpDir, "download-*")
	if err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	tmp := f.Name()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, max+1))
	switch {
	case err != nil && ctx.Err() == context.DeadlineExceeded:
		reason, err = failFetch, fmt.Errorf("downloading image %s: not done within %s", src, timeout)
	case err != nil:
		// Reading the source or writing the file: io.Copy does not say
		// which, and a source that breaks off is the likelier.
		reason, err = failFetch, fmt.Errorf("downloading image %s: %w", src, err)
	case n > max:
		reason, err = failTooLarge, tooBig
	case hex.EncodeToString(h.Sum(nil)) != sum.Value:
		reason, err = failChecksum, &MismatchError{Source: src, Sum: sum, Computed: hex.EncodeToString(h.Sum(nil))}
	default:
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// link gives file a new random token: a hard link to it under tokens.
// A file that is gone is fs.ErrNotExist.
func (c *Cache) link(file string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(b)
	if err := os.MkdirAll(filepath.Join(c.Dir, tokens), 0o750); err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	if err := os.Link(file, filepath.Join(c.Dir, tokens, tok)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", fmt.Errorf("image cache: %w", err)
	}
	return tok, nil
}

// Unlink ends a token, whichever conductor gave it: its URL answers 404
// from now on, and its file may be evicted once no other token serves
// it.
func (c *Cache) Unlink(token string) {
	if tokenRE.MatchString(token) {
		_ = os.Remove(filepath.Join(c.Dir, tokens, token))
	}
}

// Live tells whether token serves an image now.
func (c *Cache) Live(token string) bool {
	if !tokenRE.MatchString(token) {
		return false
	}
	_, err := os.Lstat(filepath.Join(c.Dir, tokens, token))
	return err == nil
}

// ErrNotFound is a token that serves nothing (never did, or no longer).
var ErrNotFound = errors.New("no image at this address")

// Open opens the image a live token serves. Anyone may: the token is the
// secret. A malformed or dead token is ErrNotFound.
func (c *Cache) Open(token string) (*os.File, fs.FileInfo, error) {
	if !tokenRE.MatchString(token) {
		return nil, nil, ErrNotFound
	}
	f, err := os.Open(filepath.Join(c.Dir, tokens, token))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// evictLocked removes images not being served until the cached files
// and room more bytes for the project tagged tag fit within MaxBytes.
// It shares the cache between projects: each removal takes the least
// recently used image (by modification time, which a reuse refreshes)
// of the project holding the most bytes, counting room as tag's, and
// tag's own first when it holds as many as any. So a project filling
// the cache evicts its own images, and another's only while that one
// holds more. Images a live token serves (any conductor's: the file has
// more than one link) are kept, even if that leaves the cache over its
// size for a while. Tokens left behind past staleToken go first.
func (c *Cache) evictLocked(tag string, room int64) {
	c.dropStaleTokens()
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		return
	}
	type file struct {
		path string
		size int64
		used time.Time
	}
	held := map[string]int64{tag: room} // bytes by project tag
	evictable := map[string][]file{}    // unpinned files by tag, oldest first
	total := room
	for _, e := range entries {
		m := keyRE.FindStringSubmatch(e.Name())
		if !e.Type().IsRegular() || m == nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		p := filepath.Join(c.Dir, e.Name())
		total += fi.Size()
		held[m[1]] += fi.Size()
		if !served(fi) {
			evictable[m[1]] = append(evictable[m[1]], file{p, fi.Size(), fi.ModTime()})
		}
	}
	for _, fs := range evictable {
		slices.SortFunc(fs, func(a, b file) int { return a.used.Compare(b.used) })
	}
	for total > c.maxBytes() {
		// The largest holder with something to evict; tag wins a tie.
		victim, most := "", int64(-1)
		for t, fs := range evictable {
			if len(fs) > 0 && (held[t] > most || held[t] == most && t == tag) {
				victim, most = t, held[t]
			}
		}
		if most < 0 {
			return
		}
		f := evictable[victim][0]
		evictable[victim] = evictable[victim][1:]
		if os.Remove(f.path) == nil {
			total -= f.size
			held[victim] -= f.size
			c.Metrics.evicted()
		}
	}
}

// served tells whether a token's link shares the file's bytes.
func served(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink > 1
}

// dropStaleTokens removes the token links older than staleToken. A
// link's own age is not kept apart from its file's, but the inode's
// change time moves with every link made or removed and every reuse, so
// one older than staleToken means every link to it is older still.
func (c *Cache) dropStaleTokens() {
	dir := filepath.Join(c.Dir, tokens)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err == nil && time.Since(changed(fi)) > staleToken {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
