// Package csi is csikit's vocabulary: the identifiers, volumes, claims,
// plugin fingerprints, access and attachment modes, secrets, sentinel
// errors and claim rules that every other csikit package shares.
//
// It has no dependencies beyond the standard library and does no I/O. The
// server side (state, rpcshim, claimgc) and the node side (fingerprint,
// mounter) exchange these types; conversion to and from the CSI spec's
// protobuf messages lives in package csi/plugin, in one place.
//
// # Identifiers
//
// Namespace, volume, plugin, node and allocation IDs end up in file paths
// on nodes and in store keys. Each has a validator (ValidateVolumeID, …)
// that accepts 1 to MaxIDLength bytes of letters, digits, '-', '_' and '.',
// and refuses "." and "..". A failed validation is an *IDError that
// matches ErrInvalidID.
//
// # Errors
//
// Sentinel errors (ErrVolumeNotFound, ErrMaxClaims, ErrPluginNotFound, …)
// are compared with errors.Is. Every error has a Class decided by one
// function, Classify: Retryable and Uncertain errors may be retried (after
// an Uncertain one the operation may or may not have happened), Final ones
// must not be. Errors from plugins carry their gRPC code as an *RPCError.
//
// # Claims
//
// CheckClaim decides, without side effects, whether a new claim on a
// volume is allowed by the volume's access mode and the claims it already
// holds. The rules follow the CSI spec's definition of each access mode;
// see AccessMode.
package csi
