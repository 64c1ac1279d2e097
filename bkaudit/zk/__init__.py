"""bkaudit.zk"""
