package conductor

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/binary"
	"slices"
	"strconv"
	"time"

	"github.com/anvilproject/anvil/ent/conductor"
)

// ringPartitions is how many points each conductor places on the ring.
// Ironic (tooz) uses 2^5; 2^7 keeps three conductors within a few percent
// of an even share while a lookup stays a binary search over a few
// hundred points.
const ringPartitions = 1 << 7

// Ring maps node UUIDs to conductors by consistent hashing, as Ironic's
// hash ring does: each conductor owns the arcs ending at md5 points of its
// name, so a conductor joining or leaving moves only the nodes on its own
// arcs (about 1/n of them), and every replica computing the ring from the
// same conductors agrees on each node's owner.
//
// Written here rather than taken from a library: the module proxy refuses
// both github.com/buraksezer/consistent and stathat.com/c/consistent, and
// the whole algorithm is the sort and search below.
type Ring struct {
	hosts  []string
	points []point
}

type point struct {
	hash uint64
	host string
}

// NewRing builds the ring over the named conductors.
func NewRing(hosts []string) *Ring {
	r := &Ring{hosts: hosts, points: make([]point, 0, len(hosts)*ringPartitions)}
	for _, h := range hosts {
		for i := range ringPartitions {
			r.points = append(r.points, point{ringHash(h + "/" + strconv.Itoa(i)), h})
		}
	}
	slices.SortFunc(r.points, func(a, b point) int {
		if a.hash != b.hash {
			return cmp.Compare(a.hash, b.hash)
		}
		// Equal hashes are astronomically rare; order them by name so
		// every replica still agrees.
		return cmp.Compare(a.host, b.host)
	})
	return r
}

func ringHash(s string) uint64 {
	sum := md5.Sum([]byte(s))
	return binary.BigEndian.Uint64(sum[:8])
}

// Owner is the conductor a node belongs to; "" when the ring is empty.
func (r *Ring) Owner(uuid string) string {
	if r == nil || len(r.points) == 0 {
		return ""
	}
	h := ringHash(uuid)
	i, _ := slices.BinarySearchFunc(r.points, h, func(p point, h uint64) int { return cmp.Compare(p.hash, h) })
	if i == len(r.points) {
		i = 0
	}
	return r.points[i].host
}

// Hosts are the ring's conductors.
func (r *Ring) Hosts() []string { return r.hosts }

// Rings are the rings of every conductor group with a live conductor.
type Rings map[string]*Ring

// Owner is the conductor the ring of the node's group maps it to; "" when
// no live conductor serves that group (Ironic's "no conductor").
func (rs Rings) Owner(uuid, group string) string { return rs[group].Owner(uuid) }

// loadRings builds the rings from the live conductors: online, with a
// heartbeat younger than the timeout. A conductor that stops or dies thus
// leaves every replica's ring within one heartbeat timeout, and its nodes
// map to the others.
func (c *Conductor) loadRings(ctx context.Context) (Rings, error) {
	cs, err := c.db.Conductor.Query().Where(conductor.Online(true), conductor.HeartbeatAtGT(time.Now().Add(-c.cfg.HeartbeatTimeout))).
		Select(conductor.FieldHostname, conductor.FieldConductorGroup).All(ctx)
	if err != nil {
		return nil, err
	}
	byGroup := map[string][]string{}
	for _, x := range cs {
		byGroup[x.ConductorGroup] = append(byGroup[x.ConductorGroup], x.Hostname)
	}
	rs := make(Rings, len(byGroup))
	for g, hosts := range byGroup {
		rs[g] = NewRing(hosts)
	}
	return rs, nil
}

// Rings returns the rings for reading (the API's node.conductor), cached
// for one heartbeat as Ironic caches its rings for hash_ring_reset_interval:
// a node's shown conductor may lag a membership change by that long.
// Periodic work never uses the cache.
func (c *Conductor) Rings(ctx context.Context) (Rings, error) {
	c.ringMu.Lock()
	defer c.ringMu.Unlock()
	if c.rings != nil && time.Since(c.ringsAt) < c.cfg.Heartbeat {
		return c.rings, nil
	}
	rs, err := c.loadRings(ctx)
	if err != nil {
		return nil, err
	}
	c.rings, c.ringsAt = rs, time.Now()
	return rs, nil
}
