package conductor

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/kdomanski/iso9660"
)

// maxConfigDrive bounds a config drive as Ironic does (64 MiB, its
// partition's size), encoded or built.
const maxConfigDrive = 64 << 20

// configDriveFor is the config drive as the agent writes it: a URL it
// downloads or a gzipped, base64-encoded ISO 9660 image, as given; or,
// for a dict (API 1.56: meta_data, user_data, network_data,
// vendor_data), the image Anvil builds from it, as Ironic builds one.
func configDriveFor(uuid string, v any) (any, error) {
	switch cd := v.(type) {
	case string:
		if u, err := url.Parse(cd); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
			return cd, nil
		}
		if len(cd) > maxConfigDrive/3*4 {
			return nil, fmt.Errorf("the config drive is larger than %d MiB", maxConfigDrive>>20)
		}
		if _, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cd)); err != nil {
			return nil, fmt.Errorf("a config drive string must be an http(s) URL or a gzipped ISO image in base64")
		}
		return cd, nil
	case map[string]any:
		return buildConfigDrive(uuid, cd)
	}
	return nil, fmt.Errorf("the config drive must be a string or an object of meta_data, user_data, network_data and vendor_data")
}

// configDriveKeys are the parts of a config drive dict.
var configDriveKeys = []string{"meta_data", "network_data", "user_data", "vendor_data"}

// buildConfigDrive writes the dict as the OpenStack config drive layout
// cloud-init reads (openstack/latest/*, volume label config-2), gzipped
// and base64-encoded.
func buildConfigDrive(uuid string, cd map[string]any) (string, error) {
	for _, k := range slices.Sorted(maps.Keys(cd)) {
		if !slices.Contains(configDriveKeys, k) {
			return "", fmt.Errorf("the config drive has %q; it takes %s", k, strings.Join(configDriveKeys, ", "))
		}
	}
	meta := map[string]any{}
	if m, ok := cd["meta_data"]; ok {
		mm, ok := m.(map[string]any)
		if !ok {
			return "", fmt.Errorf("the config drive's meta_data must be an object")
		}
		maps.Copy(meta, mm)
	}
	// cloud-init needs an instance id; Ironic's default is the node's.
	if _, ok := meta["uuid"]; !ok {
		meta["uuid"] = uuid
	}
	files := map[string][]byte{}
	var err error
	if files["openstack/latest/meta_data.json"], err = json.Marshal(meta); err != nil {
		return "", err
	}
	for key, name := range map[string]string{"network_data": "network_data.json", "vendor_data": "vendor_data2.json"} {
		if v, ok := cd[key]; ok {
			if _, ok := v.(map[string]any); !ok {
				return "", fmt.Errorf("the config drive's %s must be an object", key)
			}
			files["openstack/latest/"+name], _ = json.Marshal(v)
		}
	}
	switch ud := cd["user_data"].(type) {
	case nil:
	case string:
		files["openstack/latest/user_data"] = []byte(ud)
	case map[string]any, []any:
		files["openstack/latest/user_data"], _ = json.Marshal(ud)
	default:
		return "", fmt.Errorf("the config drive's user_data must be a string, an object or a list")
	}
	w, err := iso9660.NewWriter()
	if err != nil {
		return "", err
	}
	defer w.Cleanup()
	size := 0
	for _, name := range slices.Sorted(maps.Keys(files)) {
		size += len(files[name])
		if err := w.AddFile(bytes.NewReader(files[name]), name); err != nil {
			return "", err
		}
	}
	if size > maxConfigDrive {
		return "", fmt.Errorf("the config drive is larger than %d MiB", maxConfigDrive>>20)
	}
	var iso bytes.Buffer
	if err := w.WriteTo(&iso, "config-2"); err != nil {
		return "", err
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(iso.Bytes()); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(gz.Bytes()), nil
}
