package org.apache.hadoop.hive.metastore;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.hive.metastore.api.AlreadyExistsException;
import org.apache.hadoop.hive.metastore.api.EnvironmentContext;
import org.apache.hadoop.hive.metastore.api.InvalidObjectException;
import org.apache.hadoop.hive.metastore.api.InvalidOperationException;
import org.apache.hadoop.hive.metastore.api.MetaException;
import org.apache.hadoop.hive.metastore.api.NoSuchObjectException;
import org.apache.hadoop.hive.metastore.api.Partition;
import org.apache.hadoop.hive.metastore.api.Table;
import org.apache.hadoop.hive.metastore.api.hive_metastoreConstants;
import org.apache.hive.common.util.HiveStringUtils;

/**
 * Hive 2.3's alter handler, whose {@code alterPartitions} reads the old partitions in one batched
 * lookup. Hive's own reads every partition in full, one at a time, and then the table and the
 * partition again to decide about column statistics: about three quarters of the call's time on
 * Derby (a JFR profile; benchmarks/RESULTS.md). The writes, their transaction and the result are
 * Hive's. A call this class cannot do exactly as Hive does, by its conditions alone (a partition
 * that does not exist, one moved to another table, columns that stop including the old ones, so
 * that statistics must change, or a transactional listener), goes to Hive's own code unchanged.
 *
 * <p>It also carries a call's expectations (EnvironmentContext properties {@code staged.expect*})
 * to {@link SnapshotReadsStore}, which enforces them: a lock-free partition switch's
 * compare-and-set. The probe {@code staged.expect=probe} answers whether this metastore does.
 */
public class BatchedAlterHandler extends HiveAlterHandler {
  static final String EXPECT = "staged.expect";
  static final String PROBE = "probe";
  static final String ENFORCED = "staged.expect: partition switch expectations are enforced";

  @Override
  public List<Partition> alterPartitions(RawStore msdb, Warehouse wh, String dbname, String name,
      List<Partition> newParts, EnvironmentContext environmentContext, HiveMetaStore.HMSHandler handler)
      throws InvalidOperationException, InvalidObjectException, AlreadyExistsException, MetaException {
    Map<String, String> expected = expectations(environmentContext);
    if (expected == null) {
      return alterPartitionsBatched(msdb, wh, dbname, name, newParts, environmentContext, handler, false);
    }
    SnapshotReadsStore.EXPECTED.set(expected);
    try {
      return alterPartitionsBatched(msdb, wh, dbname, name, newParts, environmentContext, handler, true);
    } finally {
      SnapshotReadsStore.EXPECTED.remove();
    }
  }

  /** The call's expectations; null when it has none. Refused where the store cannot enforce them. */
  private Map<String, String> expectations(EnvironmentContext context) throws MetaException {
    Map<String, String> properties = context == null ? null : context.getProperties();
    if (properties == null || !properties.containsKey(EXPECT)) {
      return null;
    }
    if (!SnapshotReadsStore.class.getName().equals(hiveConf.get("hive.metastore.rawstore.impl"))) {
      throw new MetaException("this metastore cannot check a partition switch's expectations");
    }
    if (PROBE.equals(properties.get(EXPECT))) {
      throw new MetaException(ENFORCED);
    }
    return properties;
  }

  private List<Partition> alterPartitionsBatched(RawStore msdb, Warehouse wh, String dbname, String name,
      List<Partition> newParts, EnvironmentContext environmentContext, HiveMetaStore.HMSHandler handler,
      boolean expecting)
      throws InvalidOperationException, InvalidObjectException, AlreadyExistsException, MetaException {
    if (handler != null && !handler.getTransactionalListeners().isEmpty()) {
      return super.alterPartitions(msdb, wh, dbname, name, newParts, environmentContext, handler);
    }
    Table table = msdb.getTable(dbname, name);
    if (table == null && expecting) {
      throw SnapshotReadsStore.changed(dbname, name, "the table is gone");
    }
    if (table == null) {
      throw new InvalidObjectException("Unable to alter partitions because table or database does not exist.");
    }
    List<String> names = new ArrayList<>();
    for (Partition part : newParts) {
      names.add(Warehouse.makePartName(table.getPartitionKeys(), part.getValues()));
    }
    boolean success = false;
    msdb.openTransaction();
    try {
      Map<List<String>, Partition> olds = new HashMap<>();
      for (Partition old : msdb.getPartitionsByNames(dbname, name, names)) {
        olds.put(old.getValues(), old);
      }
      if (expecting && olds.size() != newParts.size()) {
        throw SnapshotReadsStore.changed(dbname, name, (newParts.size() - olds.size()) + " of those switched are gone");
      }
      if (!keepsNamesAndStatistics(dbname, name, newParts, olds)) {
        msdb.rollbackTransaction();  // only reads so far
        success = true;  // nothing left to roll back
        return super.alterPartitions(msdb, wh, dbname, name, newParts, environmentContext, handler);
      }
      List<Partition> oldParts = new ArrayList<>();
      List<List<String>> values = new ArrayList<>();
      for (Partition part : newParts) {
        Map<String, String> params = part.getParameters();
        if (params == null || params.get(hive_metastoreConstants.DDL_TIME) == null
            || Integer.parseInt(params.get(hive_metastoreConstants.DDL_TIME)) == 0) {
          part.putToParameters(hive_metastoreConstants.DDL_TIME, Long.toString(System.currentTimeMillis() / 1000));
        }
        Partition old = olds.get(part.getValues());
        oldParts.add(old);
        values.add(part.getValues());
        if (MetaStoreUtils.requireCalStats(hiveConf, old, part, table, environmentContext)) {
          if (MetaStoreUtils.isFastStatsSame(old, part)) {
            MetaStoreUtils.updateBasicState(environmentContext, part.getParameters());
          } else {
            MetaStoreUtils.updatePartitionStatsFast(part, wh, false, true, environmentContext);
          }
        }
      }
      msdb.alterPartitions(dbname, name, values, newParts);
      success = msdb.commitTransaction();
      return oldParts;
    } catch (NoSuchObjectException e) {
      throw new InvalidOperationException("Alter partition operation failed: " + e);
    } finally {
      if (!success) {
        msdb.rollbackTransaction();
      }
    }
  }

  /** Every partition exists, stays in this table, and its new columns include its old ones (by
   * name and type): Hive's own handler would then change no column statistics. */
  private static boolean keepsNamesAndStatistics(String dbname, String name, List<Partition> newParts,
      Map<List<String>, Partition> olds) {
    String db = HiveStringUtils.normalizeIdentifier(dbname);
    String table = HiveStringUtils.normalizeIdentifier(name);
    for (Partition part : newParts) {
      Partition old = olds.get(part.getValues());
      if (old == null
          || !db.equals(HiveStringUtils.normalizeIdentifier(part.getDbName()))
          || !table.equals(HiveStringUtils.normalizeIdentifier(part.getTableName()))) {
        return false;
      }
      if (old.getSd() != null && part.getSd() != null
          && !MetaStoreUtils.columnsIncluded(old.getSd().getCols(), part.getSd().getCols())) {
        return false;
      }
    }
    return true;
  }
}
