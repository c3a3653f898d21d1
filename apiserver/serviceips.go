package apiserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// Services are stored, not acted on, but kube-apiserver hands every Service
// of type ClusterIP, NodePort or LoadBalancer a cluster IP, and NodePort and
// LoadBalancer ports a node port, when it is created; clients wait for them
// (`helm install --wait` waits for spec.clusterIP). everynode allocates them
// the same way, from the ranges k3s uses by default, and routes no traffic
// to them (docs/api.md).
const (
	serviceCIDR      = "10.43.0.0/16"
	nodePortBase     = 30000
	nodePortSize     = 2768 // 30000-32767
	serviceIPPrefix  = "/everynode/service-ips/"
	nodePortPrefix   = "/everynode/node-ports/"
	allocationTries  = 64
	reservationGrace = time.Minute
)

// Each allocated value is reserved under its own etcd key, written only if
// absent, so that two servers never hand out the same one. The key holds
// "namespace/name@unixnano" of the Service it was reserved for; a
// reservation older than reservationGrace whose Service does not hold the
// value (deleted, changed, or a create that failed after reserving) is
// reclaimed when the value is picked again, so nothing needs releasing.

// allocateService gives svc the cluster IP and node ports it lacks, as
// kube-apiserver's Service registry does on create, and on update (old is
// the stored Service) first carries over what old had allocated when the
// update leaves it out. A requested value must be in its range and free. A
// dry run checks without reserving. Other kinds are left alone.
func (s *Server) allocateService(ctx context.Context, obj, old resources.Object, dryRun bool) error {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil
	}
	oldSvc, _ := old.(*corev1.Service)
	if oldSvc != nil {
		carryAllocated(svc, oldSvc)
	}
	a := serviceAllocator{st: s.store.st, holder: svc.Namespace + "/" + svc.Name, dryRun: dryRun}
	var errs field.ErrorList
	if needsClusterIP(svc) {
		switch ip := svc.Spec.ClusterIP; {
		case ip == "":
			got, err := a.allocateIP(ctx)
			if err != nil {
				return err
			}
			svc.Spec.ClusterIP = got
		case ip != corev1.ClusterIPNone && (oldSvc == nil || oldSvc.Spec.ClusterIP != ip):
			if e, err := a.claimIP(ctx, ip); err != nil {
				return err
			} else if e != nil {
				errs = append(errs, e)
			}
		}
		if len(svc.Spec.ClusterIPs) == 0 {
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		}
		if len(svc.Spec.IPFamilies) == 0 {
			svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		}
		if svc.Spec.IPFamilyPolicy == nil {
			p := corev1.IPFamilyPolicySingleStack
			svc.Spec.IPFamilyPolicy = &p
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			if p.NodePort == 0 {
				got, err := a.allocatePort(ctx, svc.Spec.Ports)
				if err != nil {
					return err
				}
				p.NodePort = got
				continue
			}
			if oldSvc != nil && slices.ContainsFunc(oldSvc.Spec.Ports, func(o corev1.ServicePort) bool { return o.NodePort == p.NodePort }) {
				continue
			}
			if e, err := a.claimPort(ctx, p.NodePort, field.NewPath("spec", "ports").Index(i).Child("nodePort")); err != nil {
				return err
			} else if e != nil {
				errs = append(errs, e)
			}
		}
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(resources.Services.GVK().GroupKind(), svc.Name, errs)
	}
	return nil
}

// needsClusterIP: every type but ExternalName gets a cluster IP (or is
// headless, "None").
func needsClusterIP(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName
}

// carryAllocated copies into svc what old had allocated and svc leaves out
// (patchAllocatedValues upstream): its cluster IPs, and the node port of
// each port that old had under the same port number and protocol.
func carryAllocated(svc, old *corev1.Service) {
	if needsClusterIP(svc) && needsClusterIP(old) && svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0 {
		svc.Spec.ClusterIP = old.Spec.ClusterIP
		svc.Spec.ClusterIPs = slices.Clone(old.Spec.ClusterIPs)
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return
	}
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.NodePort != 0 {
			continue
		}
		for _, o := range old.Spec.Ports {
			if o.Port == p.Port && o.Protocol == p.Protocol {
				p.NodePort = o.NodePort
			}
		}
	}
}

// serviceAllocator reserves values for one Service.
type serviceAllocator struct {
	st     *store.Store
	holder string // namespace/name
	dryRun bool
}

func (a serviceAllocator) allocateIP(ctx context.Context) (string, error) {
	prefix := netip.MustParsePrefix(serviceCIDR)
	size := 1 << (32 - prefix.Bits())
	base := prefix.Addr().As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	for range allocationTries {
		// Neither the network address, nor the first address (the kubernetes
		// Service's upstream), nor the broadcast address.
		n := start + 2 + uint32(rand.IntN(size-3))
		ip := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}).String()
		ok, err := a.reserve(ctx, serviceIPPrefix+ip, ip)
		if err != nil || ok {
			return ip, err
		}
	}
	return "", apierrors.NewInternalError(fmt.Errorf("no free cluster IP in %s after %d tries: delete unused Services", serviceCIDR, allocationTries))
}

func (a serviceAllocator) claimIP(ctx context.Context, ip string) (*field.Error, error) {
	path := field.NewPath("spec", "clusterIPs").Index(0)
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return field.Invalid(path, ip, "must be a valid IP address"), nil
	}
	if !netip.MustParsePrefix(serviceCIDR).Contains(addr) {
		return field.Invalid(path, ip, "failed to allocate IP "+ip+": provided IP is not in the valid range. The range of valid IPs is "+serviceCIDR), nil
	}
	ok, err := a.reserve(ctx, serviceIPPrefix+ip, ip)
	if err != nil || ok {
		return nil, err
	}
	return field.Invalid(path, ip, "failed to allocate IP "+ip+": provided IP is already allocated"), nil
}

func (a serviceAllocator) allocatePort(ctx context.Context, taken []corev1.ServicePort) (int32, error) {
	for range allocationTries {
		port := int32(nodePortBase + rand.IntN(nodePortSize))
		if slices.ContainsFunc(taken, func(p corev1.ServicePort) bool { return p.NodePort == port }) {
			continue
		}
		ok, err := a.reserve(ctx, nodePortPrefix+strconv.Itoa(int(port)), strconv.Itoa(int(port)))
		if err != nil || ok {
			return port, err
		}
	}
	return 0, apierrors.NewInternalError(fmt.Errorf("no free node port in %d-%d after %d tries: delete unused NodePort Services",
		nodePortBase, nodePortBase+nodePortSize-1, allocationTries))
}

func (a serviceAllocator) claimPort(ctx context.Context, port int32, path *field.Path) (*field.Error, error) {
	if port < nodePortBase || port >= nodePortBase+nodePortSize {
		return field.Invalid(path, port, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d",
			nodePortBase, nodePortBase+nodePortSize-1)), nil
	}
	ok, err := a.reserve(ctx, nodePortPrefix+strconv.Itoa(int(port)), strconv.Itoa(int(port)))
	if err != nil || ok {
		return nil, err
	}
	return field.Invalid(path, port, "provided port is already allocated"), nil
}

// reserve reserves value under key for the Service; false means another
// Service holds it.
func (a serviceAllocator) reserve(ctx context.Context, key, value string) (bool, error) {
	mine := a.holder + "@" + strconv.FormatInt(time.Now().UnixNano(), 10)
	cli := a.st.Client()
	if a.dryRun {
		res, err := cli.Get(ctx, key)
		if err != nil {
			return false, fmt.Errorf("read service allocation %s: %w", key, err)
		}
		if len(res.Kvs) == 0 {
			return true, nil
		}
		return a.reclaimable(ctx, string(res.Kvs[0].Value), value)
	}
	tx, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, mine)).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return false, fmt.Errorf("reserve service allocation %s: %w", key, err)
	}
	if tx.Succeeded {
		return true, nil
	}
	kvs := tx.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return false, nil // deleted meanwhile: pick another
	}
	if ok, err := a.reclaimable(ctx, string(kvs[0].Value), value); err != nil || !ok {
		return false, err
	}
	tx, err = cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)).
		Then(clientv3.OpPut(key, mine)).Commit()
	if err != nil {
		return false, fmt.Errorf("reclaim service allocation %s: %w", key, err)
	}
	return tx.Succeeded, nil
}

// reclaimable reports whether a reservation (held) may be taken for this
// Service: it is this Service's own, or it is older than reservationGrace
// and its Service does not hold value.
func (a serviceAllocator) reclaimable(ctx context.Context, held, value string) (bool, error) {
	who, stamp, _ := strings.Cut(held, "@")
	if who == a.holder {
		return true, nil
	}
	if ns, err := strconv.ParseInt(stamp, 10, 64); err == nil && time.Since(time.Unix(0, ns)) < reservationGrace {
		return false, nil
	}
	namespace, name, _ := strings.Cut(who, "/")
	obj, err := a.st.Get(ctx, resources.Services, namespace, name)
	if store.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	svc := obj.(*corev1.Service)
	if slices.Contains(svc.Spec.ClusterIPs, value) || svc.Spec.ClusterIP == value {
		return false, nil
	}
	for _, p := range svc.Spec.Ports {
		if strconv.Itoa(int(p.NodePort)) == value {
			return false, nil
		}
	}
	return true, nil
}
