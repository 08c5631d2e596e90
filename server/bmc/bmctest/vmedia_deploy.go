package bmctest

import "testing"

// CD is system id's virtual CD as the simulator reports it: the image
// URL and whether it is inserted.
func (r *Redfish) CD(t testing.TB, id string) (image string, inserted bool) {
	m := r.get(t, r.SystemPath(id)+"/VirtualMedia/Cd")
	image, _ = m["Image"].(string)
	inserted, _ = m["Inserted"].(bool)
	return
}
