package strategy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/everynode/everynode/resources"
)

// AdmitPodPriority is Kubernetes' Priority admission for a pod being
// created, with its messages: priorityClassName resolves to spec.priority and
// spec.preemptionPolicy (an unknown class is forbidden); without a class, the
// globalDefault class applies (the lowest if several), else priority 0. A
// priority or preemptionPolicy the pod gives must equal the class's. classes
// are the PriorityClasses that exist. Other objects pass unchanged.
func AdmitPodPriority(obj resources.Object, classes []*schedulingv1.PriorityClass) error {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	forbidden := func(err error) error {
		return apierrors.NewForbidden(resources.Pods.GroupResource(), pod.Name, err)
	}
	var pc *schedulingv1.PriorityClass
	for _, c := range classes {
		switch {
		case pod.Spec.PriorityClassName != "":
			if c.Name == pod.Spec.PriorityClassName {
				pc = c
			}
		case c.GlobalDefault && (pc == nil || c.Value < pc.Value):
			pc = c
		}
	}
	if pc == nil && pod.Spec.PriorityClassName != "" {
		return forbidden(fmt.Errorf("no PriorityClass with name %v was found", pod.Spec.PriorityClassName))
	}
	priority := int32(0)
	policy := corev1.PreemptLowerPriority
	if pc != nil {
		pod.Spec.PriorityClassName = pc.Name
		priority = pc.Value
		if pc.PreemptionPolicy != nil {
			policy = *pc.PreemptionPolicy
		}
	}
	if p := pod.Spec.Priority; p != nil && *p != priority {
		return forbidden(fmt.Errorf("the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name", *p, priority))
	}
	if p := pod.Spec.PreemptionPolicy; p != nil && *p != policy {
		return forbidden(fmt.Errorf("the string value of PreemptionPolicy (%s) must not be provided in pod spec; priority admission controller computed %s from the given PriorityClass name", *p, policy))
	}
	pod.Spec.Priority = &priority
	pod.Spec.PreemptionPolicy = &policy
	return nil
}
