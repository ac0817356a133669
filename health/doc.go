// Package health is the leader-side health monitor: it reads each
// volume's condition from its controller and its usage and condition
// from the nodes where it is staged or published, and it reconciles the
// attachment records with the attachments the backend reports.
//
// Where a plugin's controller advertises LIST_VOLUMES, one pass pages
// through ListVolumes (one call per page, Config.PageSize entries);
// where it advertises GET_VOLUME instead, it calls ControllerGetVolume
// per volume, Config.Parallelism at a time. A volume the controller no
// longer has is marked missing. Conditions are read where the
// controller or node plugin advertises volume health (VOLUME_CONDITION
// in CSI 1.3 to 1.12). Results are written through the Applier with
// state.SetVolumeHealth, and only when something changed: a pass over
// healthy volumes writes nothing.
//
// Where the controller advertises LIST_VOLUMES_PUBLISHED_NODES, the
// published nodes are compared with the attachment records:
//
//   - a record the backend no longer lists is flagged
//     (state.FlagAttachmentVanished) so that the next claim on the node
//     calls ControllerPublishVolume again;
//   - a listed attachment with no record and no claim, seen for
//     Config.LeakGrace, is adopted (state.AdoptAttachment, which refuses
//     if a claim or record has come meanwhile, so an attach in flight is
//     never undone) and detached as a release detaches:
//     ControllerUnpublishVolume, then state.RemoveAttachment. A detach
//     that fails is resumed by the next pass, or the next leader's.
//
// Each decision is logged at info with the volume, node and reason, and
// reported to Config.Observer as an Event.
//
// # Usage
//
//  1. On the leader, build a Monitor with New: the server's state.Reader
//     as Store, its Applier, Controllers over the router
//     (ControllerFuncs) and, for node stats, Nodes over the transport to
//     the node endpoints.
//  2. Run it in a goroutine with a ctx that ends when leadership is
//     lost; Run returns once its calls have returned.
//  3. Watch the events through Config.Observer, and read the records
//     with state.HealthReader (Health, Healths).
package health
