package bootiso_test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
	kiso "github.com/kdomanski/iso9660"

	"github.com/anvilproject/anvil/server/bootiso"
)

func random(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

const params = "ipa-api-url=http://192.0.2.1:6385 ipa-global-request-id=req-1 BOOTIF=01-52-54-00-12-34-56 nofb vga=normal"

// built is an ISO Build wrote, with what went into it.
type built struct {
	path                string
	kernel, initrd, esp []byte
}

func build(t *testing.T) built {
	t.Helper()
	// Sizes that end mid-sector, and an ESP of a few MiB as real ones are.
	b := built{path: filepath.Join(t.TempDir(), "boot.iso"),
		kernel: random(t, 3<<20+17), initrd: random(t, 5<<20+1000), esp: random(t, 4<<20+512)}
	f, err := os.Create(b.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := bootiso.Build(f, bytes.NewReader(b.kernel), bytes.NewReader(b.initrd), bytes.NewReader(b.esp), params); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(b.path), ".bootiso-*")); len(left) != 0 {
		t.Errorf("scratch left behind: %v", left)
	}
	return b
}

func sector(t *testing.T, iso []byte, n uint32) []byte {
	t.Helper()
	if int(n+1)*2048 > len(iso) {
		t.Fatalf("sector %d is past the image's end (%d bytes)", n, len(iso))
	}
	return iso[n*2048 : (n+1)*2048]
}

// TestBuildElTorito reads the image as a firmware does, from the bytes:
// the primary volume descriptor, the El Torito boot record at sector 17,
// the boot catalog it points to, whose one entry is a no-emulation EFI
// image that is the ESP's bytes.
func TestBuildElTorito(t *testing.T) {
	b := build(t)
	iso, err := os.ReadFile(b.path)
	if err != nil {
		t.Fatal(err)
	}
	pvd := sector(t, iso, 16)
	if pvd[0] != 1 || string(pvd[1:6]) != "CD001" {
		t.Fatalf("sector 16 is not a primary volume descriptor: % x", pvd[:8])
	}
	if id := strings.TrimRight(string(pvd[40:72]), " \x00"); id != bootiso.VolumeID {
		t.Errorf("volume identifier %q, want %q", id, bootiso.VolumeID)
	}
	// Rock Ridge keeps the names' case for GRUB (no file's content
	// names the ESP image).
	if !bytes.Contains(iso, []byte("NM\x10\x01\x00efiboot.img")) {
		t.Error("no Rock Ridge name for efiboot.img")
	}
	br := sector(t, iso, 17)
	if br[0] != 0 || string(br[1:6]) != "CD001" || !strings.HasPrefix(string(br[7:39]), "EL TORITO SPECIFICATION") {
		t.Fatalf("sector 17 is not an El Torito boot record: %q", br[:39])
	}
	cat := sector(t, iso, binary.LittleEndian.Uint32(br[0x47:0x4b]))
	// Validation entry: header 1, platform EFI, key 55 AA, and words
	// summing to zero.
	if cat[0] != 1 || cat[1] != 0xef || cat[0x1e] != 0x55 || cat[0x1f] != 0xaa {
		t.Fatalf("validation entry % x", cat[:32])
	}
	var sum uint16
	for i := 0; i < 32; i += 2 {
		sum += binary.LittleEndian.Uint16(cat[i : i+2])
	}
	if sum != 0 {
		t.Errorf("validation entry checksum sums to %#x", sum)
	}
	// Initial entry: bootable, no emulation, the ESP's 512-byte sectors,
	// its first sector on the disc.
	e := cat[32:64]
	if e[0] != 0x88 || e[1] != 0 {
		t.Fatalf("initial entry % x: not bootable with no emulation", e)
	}
	if n := binary.LittleEndian.Uint16(e[6:8]); int(n) != (len(b.esp)+511)/512 {
		t.Errorf("initial entry loads %d sectors, the ESP has %d", n, (len(b.esp)+511)/512)
	}
	lba := binary.LittleEndian.Uint32(e[8:12])
	if start := int(lba) * 2048; start+len(b.esp) > len(iso) || !bytes.Equal(iso[start:start+len(b.esp)], b.esp) {
		t.Errorf("the boot entry's sector %d does not hold the ESP image", lba)
	}
	if next := cat[64]; next != 0 {
		t.Errorf("the catalog has more than the EFI entry: % x", cat[64:96])
	}
}

// TestBuildFiles reads the files back through two ISO 9660 readers:
// go-diskfs's and kdomanski/iso9660's, which shares no code with the
// writer.
func TestBuildFiles(t *testing.T) {
	b := build(t)
	want := map[string][]byte{bootiso.KernelPath: b.kernel, bootiso.InitrdPath: b.initrd, bootiso.ESPPath: b.esp}
	grub := bootiso.GrubConfig(params)
	for _, p := range bootiso.GrubPaths {
		want[p] = []byte(grub)
	}
	if !strings.Contains(grub, "linux /vmlinuz "+params+" --\n") || !strings.Contains(grub, "initrd /initrd\n") {
		t.Errorf("grub.cfg does not boot the kernel with the parameters:\n%s", grub)
	}

	f, err := os.Open(b.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	dfs, err := iso9660.Read(file.New(f, true), fi.Size(), 0, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if l := strings.TrimRight(dfs.Label(), " \x00"); l != bootiso.VolumeID {
		t.Errorf("label %q", l)
	}
	for p, data := range want {
		got, err := dfs.ReadFile(strings.TrimPrefix(p, "/"))
		if err != nil {
			t.Errorf("go-diskfs: %s: %v", p, err)
		} else if !bytes.Equal(got, data) {
			t.Errorf("go-diskfs: %s has %d bytes, not the %d given", p, len(got), len(data))
		}
	}

	img, err := kiso.OpenImage(f)
	if err != nil {
		t.Fatal(err)
	}
	root, err := img.RootDir()
	if err != nil {
		t.Fatal(err)
	}
	for p, data := range want {
		got, err := kisoRead(root, strings.Split(strings.TrimPrefix(p, "/"), "/"))
		if err != nil {
			t.Errorf("kdomanski: %s: %v", p, err)
		} else if !bytes.Equal(got, data) {
			t.Errorf("kdomanski: %s has %d bytes, not the %d given", p, len(got), len(data))
		}
	}
}

// kisoRead follows path from dir. The reader sees the plain ISO 9660
// names (upper case) and not Rock Ridge's, so names match without case.
func kisoRead(dir *kiso.File, path []string) ([]byte, error) {
	kids, err := dir.GetChildren()
	if err != nil {
		return nil, err
	}
	for _, k := range kids {
		if !strings.EqualFold(k.Name(), path[0]) {
			continue
		}
		if len(path) == 1 {
			return io.ReadAll(k.Reader())
		}
		return kisoRead(k, path[1:])
	}
	names := []string{}
	for _, k := range kids {
		names = append(names, k.Name())
	}
	return nil, errors.New(path[0] + " not found among " + strings.Join(names, ", "))
}

func TestBuildRefuses(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "x.iso"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := bootiso.Build(f, strings.NewReader("k"), strings.NewReader("r"), nil, params); !errors.Is(err, bootiso.ErrNoESP) {
		t.Errorf("without an ESP: %v", err)
	}
	if err := bootiso.Build(f, strings.NewReader("k"), strings.NewReader("r"), strings.NewReader("e"), "a\nb"); err == nil {
		t.Error("a line break in the parameters was accepted")
	}
}

func TestStore(t *testing.T) {
	s := &bootiso.Store{Dir: filepath.Join(t.TempDir(), "isos"), BaseURL: "http://anvil.example:6385/"}
	name, url, err := s.Create(func(f *os.File) error { _, err := f.WriteString("iso"); return err })
	if err != nil {
		t.Fatal(err)
	}
	if len(name) != 68 || url != "http://anvil.example:6385/boot-iso/"+name {
		t.Errorf("name %q url %q", name, url)
	}
	f, fi, err := s.Open(name)
	if err != nil || fi.Size() != 3 {
		t.Fatalf("open: %v", err)
	}
	f.Close()
	for _, bad := range []string{"../x.iso", ".building-1", strings.Repeat("A", 64) + ".iso"} {
		if _, _, err := s.Open(bad); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("open %q: %v", bad, err)
		}
	}
	if err := s.Remove(name); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Open(name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("open after remove: %v", err)
	}
	if err := s.Remove(name); err != nil {
		t.Errorf("removing again: %v", err)
	}
	// A failed build leaves nothing behind.
	if _, _, err := s.Create(func(*os.File) error { return errors.New("boom") }); err == nil {
		t.Error("a failed build succeeded")
	}
	if left, _ := os.ReadDir(s.Dir); len(left) != 0 {
		t.Errorf("left in the store: %v", left)
	}
}
